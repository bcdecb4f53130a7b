"""``cloudlet studio open``: a one-time sign-in link to the web studio (``docs/studio.md``)."""

from __future__ import annotations

import os
import webbrowser
from typing import Annotated

import typer

from cloudlet.cli.compute import state
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


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="studio")
