"""``cloudlet studio open``: a one-time sign-in link to the web studio (``docs/studio.md``)."""

from __future__ import annotations

import os
import urllib.parse
import webbrowser
from typing import Annotated

import typer
from rich.markup import escape

from cloudlet.cli.compute import state
from cloudlet.cli.output import err_console
from cloudlet.cli.state import CliState
from cloudlet.client._rest import API_PREFIX

app = typer.Typer(help="The web studio: jobs, compute and quota in a browser.", no_args_is_help=True)


def _has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


@app.command("open")
def open_studio(
    ctx: typer.Context,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Only print the link; do not open a browser.")
    ] = False,
) -> None:
    """Print a single-use sign-in link (valid 5 minutes) as you, and open it in a browser when
    this machine has one."""
    st = state(ctx)
    link = st.rest.post(f"{API_PREFIX}/studio/signin-links")
    url = str(link["url"])
    typer.echo(url)
    if not no_browser and _has_display():
        webbrowser.open(url)


def open_page(st: CliState, url: str | None) -> None:
    """``--web``: print URL (a studio page, the view's ``services.Studio.endpoint``) on stderr, the
    command's own output staying on stdout; where this machine has a display, open a single-use
    sign-in link that lands on that page, so the browser arrives signed in."""
    if not url:
        err_console.print("note: --web: the server sent no studio link for this job", highlight=False)
        return
    err_console.print(f"Studio: {escape(url)}", highlight=False)
    if not _has_display():
        return
    parts = urllib.parse.urlsplit(url)
    page = parts.path + (f"?{parts.query}" if parts.query else "")
    link = st.rest.post(f"{API_PREFIX}/studio/signin-links", {"next": page})
    webbrowser.open(str(link["url"]))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="studio")
