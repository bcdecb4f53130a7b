"""Flags ``az ml`` takes that mean nothing more here, shared by the commands that take them, so
Azure's own scripts run as written: each is accepted, and where it asks for something cloudlet does
not do, the user is told so on stderr (or refused, where going on would do the wrong thing)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from cloudlet.cli.output import err_console
from cloudlet.client._config import ConfigurationError

YesOpt = Annotated[bool, typer.Option("-y", "--yes", help="Do not prompt (there is no prompt).")]
NoWaitOpt = Annotated[bool, typer.Option("--no-wait", help="Return once accepted.")]
LocalOpt = Annotated[
    bool,
    typer.Option(
        "--local",
        help="az's local endpoint: here an endpoint is the same either way; "
        "`online-deployment create --local` runs its replicas on this machine.",
    ),
]
WebOpt = Annotated[
    bool,
    typer.Option(
        "--web",
        help="Print the job's studio page on stderr; open it in a browser, signed in, when this "
        "machine has a display.",
    ),
]
RegistryOpt = Annotated[
    str | None, typer.Option("--registry-name", help="An Azure ML registry (not served here: refused).")
]


def no_registries(registry: str | None) -> None:
    if registry:
        raise ConfigurationError(
            f"--registry-name {registry}: cloudlet serves no Azure ML registries (they live in Azure); "
            "register the asset in your workspace instead (model/component/environment create --file …)"
        )


def ignored(flag: str, why: str) -> None:
    err_console.print(f"note: {escape(flag)}: {escape(why)}", highlight=False)
