"""The CLI's per-invocation state (``CliState``): the global options and a lazily built REST
client. The root callback (``cli/main.py``) stores it in ``ctx.obj``; the command modules read it
from there (``cli/compute.py``'s ``state``) and import its type from here."""

from __future__ import annotations

import time
from typing import Any

import httpx
import typer
from rich.markup import escape

from cloudlet.cli.output import OutputFormat, err_console, print_error, render
from cloudlet.client._config import CloudletConfig, load_config
from cloudlet.client._rest import (
    HttpResponseError,
    RestClient,
    compute_path,
    location_path,
    operation_error,
    operation_id_from,
    ws_path,
)


class CliState:
    """Global options plus a lazily built REST client; stored in ``ctx.obj``."""

    def __init__(
        self,
        workspace: str | None = None,
        resource_group: str | None = None,
        subscription: str | None = None,
        output: OutputFormat = OutputFormat.table,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.overrides = {"workspace": workspace, "resource_group": resource_group}
        self.overrides["subscription_id"] = subscription
        self.output = output
        self.query: str | None = None  # --query: a JMESPath expression over what is printed
        self._transport = transport
        self._config: CloudletConfig | None = None
        self._rest: RestClient | None = None

    @property
    def config(self) -> CloudletConfig:
        if self._config is None:
            self._config = load_config().with_overrides(**self.overrides)
        return self._config

    @property
    def rest(self) -> RestClient:
        if self._rest is None:
            cfg = self.config
            self._rest = RestClient(cfg.require_endpoint(), cfg.api_key, transport=self._transport)
        return self._rest

    def ws_path(self, workspace: str | None = None) -> str:
        cfg = self.config
        return ws_path(
            cfg.require_subscription(), cfg.require_resource_group(), workspace or cfg.require_workspace()
        )

    def compute_path(self, name: str) -> str:
        cfg = self.config
        return compute_path(
            cfg.require_subscription(), cfg.require_resource_group(), cfg.require_workspace(), name
        )

    def location_path(self, location: str | None) -> str:
        cfg = self.config
        return location_path(cfg.require_subscription(), location or cfg.location or "local")

    def emit(self, data: Any, kind: str | None = None) -> None:
        render(data, self.output, kind, query=self.query)

    def wait(self, response: httpx.Response, label: str, no_wait: bool = False) -> dict[str, Any] | None:
        """Follow the operation an LRO answer names; exit 1 if it fails. ``None`` when not waited."""
        op_id = operation_id_from(response)
        if op_id is None:
            return None
        if no_wait:
            err_console.print(f"{escape(label)}: started operation {escape(op_id)}", highlight=False)
            return None
        start = time.monotonic()
        status_text = f"{escape(label)}: InProgress"
        try:
            with err_console.status(status_text) as status:

                def progress(op: dict[str, Any]) -> None:
                    elapsed = int(time.monotonic() - start)
                    status.update(f"{escape(label)}: {escape(str(op.get('status')))} ({elapsed}s)")

                op = self.rest.wait_operation(op_id, on_progress=progress)
        except KeyboardInterrupt:
            err_console.print(
                f"interrupted; operation {escape(op_id)} continues on the server", highlight=False
            )
            raise typer.Exit(code=130) from None
        elapsed = int(time.monotonic() - start)
        if op.get("status") != "Succeeded":
            exc: HttpResponseError = operation_error(op)
            err_console.print(f"{escape(label)}: {escape(str(op.get('status')))} after {elapsed}s")
            print_error(exc)
            raise typer.Exit(code=1)
        err_console.print(f"{escape(label)}: Succeeded ({elapsed}s)", highlight=False)
        return op
