"""``cloudlet online-endpoint …`` and ``cloudlet online-deployment …`` (issue 14), with ``az ml``'s
flags: ``--file``, ``-n``, ``-e/--endpoint-name``, ``--all-traffic``, ``--traffic "blue=90 green=10"``,
``--mirror-traffic "green=10"``, ``--request-file``, ``--deployment-name``, ``--local``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cloudlet.cli.az_flags import LocalOpt, NoWaitOpt, YesOpt, ignored
from cloudlet.cli.compute import build_body, load_yaml_file, state
from cloudlet.cli.output import err_console
from cloudlet.client._config import ConfigurationError
from cloudlet.client.online_endpoints import OnlineDeploymentOperations, OnlineEndpointOperations
from cloudlet.client.operations import _Scope
from cloudlet.domain.errors import CloudletError

endpoints = typer.Typer(
    help="Online endpoints: real-time scoring (like `az ml online-endpoint`).", no_args_is_help=True
)
deployments = typer.Typer(
    help="Online deployments: a model and scoring script on replicas (like `az ml online-deployment`).",
    no_args_is_help=True,
)
FileOpt = Annotated[str | None, typer.Option("-f", "--file", help="The YAML file (CLI v2 shape).")]
EndpointOpt = Annotated[str, typer.Option("-e", "--endpoint-name", help="The endpoint.")]
NameOpt = Annotated[str, typer.Option("-n", "--name", help="Name.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="KEY.PATH=VALUE (YAML-typed), repeatable.")]


def _ops(ctx: typer.Context) -> tuple[OnlineEndpointOperations, OnlineDeploymentOperations]:
    st = state(ctx)
    scope = _Scope(st.config)
    return OnlineEndpointOperations(st.rest, scope), OnlineDeploymentOperations(st.rest, scope)


def _weights(text: str | None, target: str) -> dict[str, int] | None:
    if text is None:
        return None
    # The endpoints' rules and the models they build on: here, not with every command's start.
    from cloudlet.domain.endpoints.online_endpoints import parse_traffic_flag

    try:
        return parse_traffic_flag(text, target)
    except CloudletError as exc:
        raise ConfigurationError(f"--{target.replace('_', '-')}: {exc.message}") from None


@endpoints.command("create")
def endpoint_create(
    ctx: typer.Context,
    file: FileOpt = None,
    name: Annotated[str | None, typer.Option("-n", "--name", help="Name (overrides the file's).")] = None,
    auth_mode: Annotated[str | None, typer.Option("--auth-mode", help="key or aml_token.")] = None,
    set_: SetOpt = None,
    local: LocalOpt = False,
    no_wait: NoWaitOpt = False,
) -> None:
    """Create an endpoint (its keys are made; no traffic until a deployment takes some)."""
    doc = _with_sets(load_yaml_file(file, "online endpoint") if file else {}, set_)
    doc.pop("$schema", None)
    if name:
        doc["name"] = name
    if auth_mode:
        doc["auth_mode"] = auth_mode
    if not doc.get("name"):
        raise ConfigurationError("name the endpoint: -n NAME or name: in --file")
    state(ctx).emit(_ops(ctx)[0].create_or_update(doc))


def _with_sets(doc: dict[str, Any], sets: list[str] | None) -> dict[str, Any]:
    try:
        return build_body(doc, sets)
    except ValueError as exc:
        raise ConfigurationError(f"--set: {exc}") from exc


@endpoints.command("show")
def endpoint_show(ctx: typer.Context, name: NameOpt, local: LocalOpt = False) -> None:
    """Show an endpoint: its scoring URI, auth mode and traffic."""
    state(ctx).emit(_ops(ctx)[0].get(name))


@endpoints.command("list")
def endpoint_list(ctx: typer.Context) -> None:
    """The workspace's online endpoints."""
    state(ctx).emit(_ops(ctx)[0].list(), "online-endpoint")


@endpoints.command("update")
def endpoint_update(
    ctx: typer.Context,
    name: NameOpt,
    traffic: Annotated[str | None, typer.Option("--traffic", help='e.g. "blue=90 green=10"')] = None,
    mirror_traffic: Annotated[str | None, typer.Option("--mirror-traffic", help='e.g. "green=10"')] = None,
) -> None:
    """Change an endpoint's traffic or mirrored traffic."""
    updated = _ops(ctx)[0].update_traffic(
        name, _weights(traffic, "traffic"), _weights(mirror_traffic, "mirror_traffic")
    )
    state(ctx).emit(updated)


@endpoints.command("delete")
def endpoint_delete(
    ctx: typer.Context,
    name: NameOpt,
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
    local: LocalOpt = False,
) -> None:
    """Delete an endpoint with its deployments (their replicas stop)."""
    _ops(ctx)[0].delete(name)
    err_console.print(f"deleted online endpoint {escape(name)}", highlight=False)


@endpoints.command("get-credentials")
def endpoint_credentials(ctx: typer.Context, name: NameOpt) -> None:
    """The endpoint's keys (key auth) or a token (aml_token)."""
    state(ctx).emit(_ops(ctx)[0].get_keys(name))


@endpoints.command("regenerate-keys")
def endpoint_regenerate(
    ctx: typer.Context,
    name: NameOpt,
    key_type: Annotated[str, typer.Option("--key-type", help="primary or secondary.")] = "primary",
) -> None:
    """Make a new primary or secondary key: the old one stops working at once."""
    _ops(ctx)[0].regenerate_keys(name, key_type.capitalize())
    err_console.print(f"regenerated the {escape(key_type)} key of {escape(name)}", highlight=False)


@endpoints.command("invoke")
def endpoint_invoke(
    ctx: typer.Context,
    name: NameOpt,
    request_file: Annotated[str, typer.Option("-r", "--request-file", help="The request body (JSON).")],
    deployment_name: Annotated[
        str | None, typer.Option("-d", "--deployment-name", help="Send to this deployment.")
    ] = None,
    local: LocalOpt = False,
) -> None:
    """Score a request through the endpoint's gateway; the answer is printed as is."""
    answer = _ops(ctx)[0].invoke(name, request_file=request_file, deployment_name=deployment_name)
    if answer.status_code != 200:
        err_console.print(f"{answer.status_code}: {escape(answer.text)}", highlight=False)
        raise typer.Exit(code=1)
    sys.stdout.write(answer.text + "\n")


def _deploy(ctx: typer.Context, doc: dict[str, Any], base: Path, local: bool, no_wait: bool) -> None:
    ops_d = _ops(ctx)[1]
    created = ops_d.create_or_update(doc, base_path=base, local=local)
    if no_wait:
        state(ctx).emit(created)
        return
    shown = ops_d.wait(created["endpoint_name"], created["name"], generation=created["generation"])
    if shown["provisioning_state"] == "Failed":
        err_console.print(f"deployment {escape(created['name'])} failed: {escape(str(shown['reason']))}")
        raise typer.Exit(code=1)
    state(ctx).emit(shown)


def _document(
    file: str | None, name: str | None, endpoint: str | None, sets: list[str] | None = None
) -> tuple[dict[str, Any], Path]:
    if not file:
        raise ConfigurationError("give the deployment's YAML: --file")
    doc = _with_sets(load_yaml_file(file, "online deployment"), sets)
    doc.pop("$schema", None)
    if name:
        doc["name"] = name
    if endpoint:
        doc["endpoint_name"] = endpoint
    if not doc.get("endpoint_name"):
        raise ConfigurationError("name the endpoint: -e NAME or endpoint_name: in --file")
    return doc, Path.cwd() if file == "-" else Path(file).resolve().parent


@deployments.command("create")
def deployment_create(
    ctx: typer.Context,
    file: FileOpt = None,
    name: Annotated[str | None, typer.Option("-n", "--name", help="Name (overrides the file's).")] = None,
    endpoint_name: Annotated[str | None, typer.Option("-e", "--endpoint-name", help="The endpoint.")] = None,
    all_traffic: Annotated[
        bool, typer.Option("--all-traffic", help="Send all traffic here once ready.")
    ] = False,
    local: Annotated[
        bool, typer.Option("--local", help="Run the replicas on this machine (debugging).")
    ] = False,
    no_wait: NoWaitOpt = False,
    set_: SetOpt = None,
    skip_script_validation: Annotated[
        bool, typer.Option("--skip-script-validation", help="Accepted (the script is not validated ahead).")
    ] = False,
    package_model: Annotated[
        bool, typer.Option("--package-model", "--with-package", help="Accepted; the model is not packaged.")
    ] = False,
) -> None:
    """Create a deployment: uploads its model and code, starts its replicas, waits until ready."""
    if package_model:
        ignored("--package-model", "cloudlet serves the model as it is; no package image is built")
    doc, base = _document(file, name, endpoint_name, set_)
    _deploy(ctx, doc, base, local, no_wait)
    if all_traffic:
        _ops(ctx)[0].update_traffic(doc["endpoint_name"], {doc["name"]: 100})


@deployments.command("update")
def deployment_update(
    ctx: typer.Context,
    file: FileOpt = None,
    name: Annotated[str | None, typer.Option("-n", "--name", help="Name (overrides the file's).")] = None,
    endpoint_name: Annotated[str | None, typer.Option("-e", "--endpoint-name", help="The endpoint.")] = None,
    no_wait: NoWaitOpt = False,
    set_: SetOpt = None,
    local: LocalOpt = False,
) -> None:
    """Update a deployment: new replicas start; the old ones serve until they are ready."""
    doc, base = _document(file, name, endpoint_name, set_)
    _deploy(ctx, doc, base, False, no_wait)


@deployments.command("show")
def deployment_show(
    ctx: typer.Context, name: NameOpt, endpoint_name: EndpointOpt, local: LocalOpt = False
) -> None:
    """A deployment: its state, stage, failure reason, replicas and request counts."""
    state(ctx).emit(_ops(ctx)[1].get(endpoint_name, name))


@deployments.command("list")
def deployment_list(ctx: typer.Context, endpoint_name: EndpointOpt) -> None:
    """An endpoint's deployments."""
    state(ctx).emit(_ops(ctx)[1].list(endpoint_name), "online-deployment")


@deployments.command("delete")
def deployment_delete(
    ctx: typer.Context,
    name: NameOpt,
    endpoint_name: EndpointOpt,
    yes: YesOpt = False,
    no_wait: NoWaitOpt = False,
    local: LocalOpt = False,
) -> None:
    """Delete a deployment (refused while it takes traffic); its replicas stop."""
    _ops(ctx)[1].delete(endpoint_name, name)
    err_console.print(f"deleted online deployment {escape(name)}", highlight=False)


@deployments.command("get-logs")
def deployment_logs(
    ctx: typer.Context,
    name: NameOpt,
    endpoint_name: EndpointOpt,
    lines: Annotated[int, typer.Option("-l", "--lines", help="The last N lines.")] = 200,
    local: LocalOpt = False,
    container: Annotated[
        str | None, typer.Option("-c", "--container", help="inference-server (the only one here).")
    ] = None,
) -> None:
    """The inference server's log of the deployment's first replica."""
    sys.stdout.write(_ops(ctx)[1].get_logs(endpoint_name, name, lines) + "\n")


def register(root: typer.Typer) -> None:
    root.add_typer(endpoints, name="online-endpoint")
    root.add_typer(deployments, name="online-deployment")
