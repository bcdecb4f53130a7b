"""``cloudlet`` command line: ``cloudlet [GLOBAL OPTIONS] GROUP VERB [OPTIONS]``.

Global options (``-w``, ``-g``, ``--subscription``, ``-o``) may also be written after the verb,
as with ``az``: ``cloudlet compute list -o json``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from cloudlet.cli.az_args import GLOBAL_VALUE_OPTIONS, expand_prefixes, hoist_global_options
from cloudlet.cli.output import OutputFormat, compile_query, print_error
from cloudlet.cli.state import CliState
from cloudlet.client._config import ConfigurationError
from cloudlet.client._rest import CloudletClientError


class CloudletGroup(TyperGroup):
    """Root group: accepts global options anywhere and turns client errors into exit code 1."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if ctx.parent is None:
            names = {*self._long_options(self), *self._long_options(self._called(ctx, list(args)))}
            args = hoist_global_options(expand_prefixes(list(args), names))
        return super().parse_args(ctx, args)

    def _called(self, ctx: Any, args: list[str]) -> Any:
        """The command the words of ``args`` name (``online-deployment create``), or None."""
        command: Any = self
        words = iter(args)
        for word in words:
            if word in GLOBAL_VALUE_OPTIONS:
                next(words, None)  # its value is no command
                continue
            if word.startswith("-"):
                continue
            if not hasattr(command, "get_command"):  # a verb, not a group (typer bundles its own click)
                break
            found = command.get_command(ctx, word)
            if found is None:
                break
            command = found
        return None if command is self else command

    @staticmethod
    def _long_options(command: Any) -> list[str]:
        if command is None:
            return []
        return [o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (CloudletClientError, ConfigurationError, TimeoutError) as exc:
            print_error(exc)
            raise typer.Exit(code=1) from None


app = typer.Typer(
    cls=CloudletGroup,
    name="cloudlet",
    help="Self-hosted ML compute: compute instances, clusters, quotas, locks (like `az ml`).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main(
    ctx: typer.Context,
    workspace: Annotated[
        str | None, typer.Option("-w", "--workspace", help="Workspace (default from config.json).")
    ] = None,
    resource_group: Annotated[
        str | None, typer.Option("-g", "--resource-group", help="Resource group (default from config.json).")
    ] = None,
    subscription: Annotated[
        str | None, typer.Option("--subscription", help="Subscription id (default from config.json).")
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("-o", "--output", help="Output format.", envvar="CLOUDLET_OUTPUT")
    ] = OutputFormat.table,
    query: Annotated[
        str | None,
        typer.Option("--query", help="JMESPath over the output, as az: --query name -o tsv."),
    ] = None,
    workspace_name: Annotated[str | None, typer.Option("--workspace-name", help="Same as -w.")] = None,
    _debug: Annotated[bool, typer.Option("--debug", hidden=True, help="Accepted as az does.")] = False,
    _verbose: Annotated[bool, typer.Option("--verbose", hidden=True, help="Accepted as az does.")] = False,
    _only_errors: Annotated[
        bool, typer.Option("--only-show-errors", hidden=True, help="Accepted as az does.")
    ] = False,
) -> None:
    """Global options may be given before or after the command."""
    workspace = workspace or workspace_name
    if query is not None:
        try:
            compile_query(query)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--query") from None
    if isinstance(ctx.obj, CliState):  # pre-built (tests): apply the options given
        given = {"workspace": workspace, "resource_group": resource_group, "subscription_id": subscription}
        ctx.obj.overrides.update({k: v for k, v in given.items() if v is not None})
        ctx.obj.output = output
    else:
        ctx.obj = CliState(workspace, resource_group, subscription, output)
    ctx.obj.query = query


@app.command("server")
def server_cmd(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8571,
    home: Annotated[
        str | None, typer.Option(help="State directory (default $CLOUDLET_HOME or ~/.cloudlet).")
    ] = None,
    db: Annotated[str | None, typer.Option(help="Database URL (default SQLite under --home).")] = None,
    tls_port: Annotated[
        int | None,
        typer.Option(
            help="HTTPS port for the Azure ML facade (default --port + 1, i.e. 8572; 0 = any free)."
        ),
    ] = None,
    workers: Annotated[
        str,
        typer.Option(
            envvar="CLOUDLET_WORKERS",
            help="Server processes sharing the ports (reads scale across cores): 'auto' (the "
            "default) for this host's usable CPUs (at most 8), or a number (1: one process).",
        ),
    ] = "auto",  # serving.DEFAULT_WORKERS (the client-only CLI does not import the server)
    public_url: Annotated[
        str | None,
        typer.Option(
            help="The address people reach the server at (scheme://host[:port], e.g. "
            "https://cloudlet.example.com): the base of every link it hands out (studio, compute "
            "instances, sign-in, scoring URIs). Default $CLOUDLET_PUBLIC_URL, else the bind address.",
        ),
    ] = None,
    forwarded_allow_ips: Annotated[
        str | None,
        typer.Option(
            help="The reverse proxies (addresses or networks, comma-separated; '*': any peer; '': "
            "none) whose X-Forwarded-Proto and X-Forwarded-For stand for the client's scheme and "
            "address. Default $CLOUDLET_FORWARDED_ALLOW_IPS, else 127.0.0.1.",
        ),
    ] = None,
) -> None:
    """Run a cloudlet server (the API and the control loops) in the foreground."""
    if importlib.util.find_spec("fastapi") is None:  # a client-only install: `pip install cloudlet`
        print_error("the server needs the 'server' extra (missing fastapi): pip install 'cloudlet[server]'")
        raise typer.Exit(code=1)
    # The CLI talks HTTP only: it never loads the server, it becomes it (same process id).
    argv = ["--host", host, "--port", str(port), "--workers", workers]
    given = (
        ("--home", home),
        ("--db", db),
        ("--tls-port", tls_port),
        ("--public-url", public_url),
        ("--forwarded-allow-ips", forwarded_allow_ips),
    )
    for flag, value in given:
        if value is not None:
            argv.append(f"{flag}={value}")  # "=": a value starting with "-" stays a value
    sys.stdout.flush()
    sys.stderr.flush()
    server = [sys.executable, "-m", "cloudlet.startup", "cloudlet.server_command"]  # cloudlet/startup.py
    os.execv(sys.executable, [*server, *argv])


def _register() -> None:
    from cloudlet.cli import admin, assets, azureml, batch_endpoints, catalog, compute, compute_instance, jobs

    compute_instance.register(compute.app)  # show-setup-log, connect-ssh
    app.add_typer(compute.app, name="compute")
    app.add_typer(jobs.app, name="job")
    admin.register(app)
    catalog.register(app)
    azureml.register(app)
    assets.register(app)  # data, model, environment
    from cloudlet.cli import online

    online.register(app)  # online-endpoint, online-deployment (issue 14)
    batch_endpoints.register(app)  # batch-endpoint, batch-deployment
    from cloudlet.cli import datastores

    datastores.register(app)  # datastore upload/download (the samples' example-data)
    from cloudlet.cli import studio

    studio.register(app)  # studio open: a one-time sign-in link (issue 27)
    from cloudlet.cli import events

    events.register(app)  # the lifecycle events feed (issue 29)
    from cloudlet.cli import usage

    usage.register(app)  # usage --idle (issue 29)
    from cloudlet.cli import teams

    teams.register(app)  # team create|update|show|list|delete (issue 31)
    from cloudlet.cli import schedules

    schedules.register(app)  # schedule create|update|show|list|enable|disable|delete


_register()
