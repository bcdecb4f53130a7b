"""``cloudlet compute …``: create, show, list, update, delete, start/stop/restart, sizes, usage."""

from __future__ import annotations

import datetime as _dt
import re
import sys
from pathlib import Path
from typing import Annotated, Any, cast

import typer
import yaml
from rich.markup import escape

from cloudlet.cli import fair_share_table
from cloudlet.cli.output import OutputFormat, err_console
from cloudlet.cli.state import CliState
from cloudlet.cli.whatif import HELP as WHAT_IF_HELP
from cloudlet.cli.whatif import what_if
from cloudlet.client._config import ConfigurationError
from cloudlet.client._rest import API_PREFIX

app = typer.Typer(
    help="Manage compute targets (clusters, instances, attached machines).", no_args_is_help=True
)

NameOpt = Annotated[str, typer.Option("-n", "--name", help="Compute name.")]
NoWaitOpt = Annotated[bool, typer.Option("--no-wait", help="Return once the operation is accepted.")]

_TOKEN = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def state(ctx: typer.Context) -> CliState:
    """The ``CliState`` the root callback stored."""
    return cast(CliState, ctx.find_root().obj)


# ----------------------------------------------------------------------------------------------
# Pure helpers (unit-tested): --set parsing, YAML loading, request-body assembly.


def parse_path(path: str) -> list[str | int]:
    """``a.b[0].c`` → ``["a", "b", 0, "c"]``."""
    if not path or path.startswith(".") or path.endswith(".") or ".." in path:
        raise ValueError(f"invalid --set path {path!r}")
    tokens: list[str | int] = []
    pos = 0
    for match in _TOKEN.finditer(path):
        gap = path[pos : match.start()]
        if gap not in ("", "."):
            raise ValueError(f"invalid --set path {path!r}")
        tokens.append(int(match.group(2)) if match.group(2) is not None else match.group(1))
        pos = match.end()
    if pos != len(path) or not tokens or isinstance(tokens[0], int):
        raise ValueError(f"invalid --set path {path!r}")
    return tokens


def _plain(value: Any) -> Any:
    """YAML values made JSON-safe: dates and timestamps become ISO strings."""
    if isinstance(value, _dt.date | _dt.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def parse_set(expr: str) -> tuple[list[str | int], Any]:
    """``key.path=value`` → (path tokens, YAML-typed value). ``a=`` sets ``null``."""
    if "=" not in expr:
        raise ValueError(f"--set expects KEY=VALUE, got {expr!r}")
    key, raw = expr.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return parse_path(key.strip()), _plain(value)


def _descend(node: Any, token: str | int, empty: Any) -> Any:
    current = node[token] if isinstance(token, int) else node.get(token)
    if current is None:
        node[token] = current = empty
    elif not isinstance(current, dict | list):
        raise ValueError(f"cannot set inside {token!r}: it holds {current!r}")
    return current


def apply_set(doc: dict[str, Any], tokens: list[str | int], value: Any) -> None:
    """Set ``value`` at ``tokens`` in ``doc``, creating dicts / extending lists on the way."""
    node: Any = doc
    for i, token in enumerate(tokens):
        last = i == len(tokens) - 1
        nxt: Any = None if last else ([] if isinstance(tokens[i + 1], int) else {})
        if isinstance(token, int):
            if not isinstance(node, list):
                raise ValueError(f"cannot index a {type(node).__name__} with [{token}]")
            while len(node) <= token:
                node.append(None)
            if last:
                node[token] = value
            else:
                node = _descend(node, token, nxt)
        else:
            if not isinstance(node, dict):
                raise ValueError(f"cannot set key {token!r} inside a {type(node).__name__}")
            if last:
                node[token] = value
            else:
                node = _descend(node, token, nxt)


def load_yaml_file(path: str, what: str = "compute") -> dict[str, Any]:
    """Load a compute (or job) YAML file (``-`` reads stdin); it must hold a mapping."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path} must hold a YAML mapping of {what} fields")
    return dict(_plain(data))


def build_body(
    file_doc: dict[str, Any] | None,
    sets: list[str] | None = None,
    fields: dict[str, Any] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """File → ``--set`` expressions → explicit flags → ``--name`` (later wins)."""
    body: dict[str, Any] = dict(file_doc or {})
    for expr in sets or []:
        tokens, value = parse_set(expr)
        apply_set(body, tokens, value)
    body.update({k: v for k, v in (fields or {}).items() if v is not None})
    if name:
        body["name"] = name
    return body


IdentityTypeOpt = Annotated[
    str | None,
    typer.Option("--identity-type", help="system_assigned, user_assigned, both (comma) or none."),
]
UserIdentitiesOpt = Annotated[
    str | None,
    typer.Option(
        "--user-assigned-identities", help="Resource ids of user-assigned identities, comma-separated."
    ),
]


def identity_of(identity_type: str | None, user_assigned: str | None) -> dict[str, Any] | None:
    """az's --identity-type / --user-assigned-identities as the YAML's ``identity:``."""
    if identity_type is None and user_assigned is None:
        return None
    if identity_type is None:
        raise ConfigurationError("--user-assigned-identities goes with --identity-type user_assigned")
    identity: dict[str, Any] = {"type": identity_type.replace(" ", "").lower()}
    if user_assigned:
        ids = [part.strip() for part in user_assigned.split(",") if part.strip()]
        identity["user_assigned_identities"] = [{"resource_id": rid} for rid in ids]
    return identity


# ----------------------------------------------------------------------------------------------
# Commands.


@app.command("create")
def create(
    ctx: typer.Context,
    file: Annotated[str | None, typer.Option("-f", "--file", help="Compute YAML file (- for stdin).")] = None,
    name: Annotated[str | None, typer.Option("-n", "--name", help="Name (overrides the file).")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="KEY.PATH=VALUE (YAML-typed), repeatable, e.g. --set max_instances=4."),
    ] = None,
    type_: Annotated[
        str | None, typer.Option("-t", "--type", help="amlcompute, computeinstance, virtualmachine …")
    ] = None,
    size: Annotated[str | None, typer.Option("--size", help="VM size, e.g. Standard_DS3_v2.")] = None,
    location: Annotated[str | None, typer.Option("-l", "--location", help="Location.")] = None,
    min_instances: Annotated[int | None, typer.Option("--min-instances")] = None,
    max_instances: Annotated[int | None, typer.Option("--max-instances")] = None,
    idle_time_before_scale_down: Annotated[
        int | None, typer.Option("--idle-time-before-scale-down", help="Seconds.")
    ] = None,
    tier: Annotated[str | None, typer.Option("--tier", help="dedicated or low_priority.")] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    no_wait: NoWaitOpt = False,
    identity_type: IdentityTypeOpt = None,
    user_assigned_identities: UserIdentitiesOpt = None,
) -> None:
    """Create (or update) a compute from a YAML file and/or options."""
    st = state(ctx)
    try:
        doc = load_yaml_file(file) if file else {}
        body = build_body(
            doc,
            set_,
            {
                "type": type_,
                "size": size,
                "location": location,
                "min_instances": min_instances,
                "max_instances": max_instances,
                "idle_time_before_scale_down": idle_time_before_scale_down,
                "tier": tier,
                "description": description,
                "identity": identity_of(identity_type, user_assigned_identities),
            },
            name,
        )
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    compute_name = body.get("name")
    if not compute_name or not isinstance(compute_name, str):
        raise ConfigurationError("the compute needs a name: set `name:` in the file or pass --name")
    response = st.rest.send("PUT", st.compute_path(compute_name), json=body)
    created = response.json()
    verb = "created" if response.status_code == 201 else "updated"
    op = st.wait(response, f"compute '{compute_name}' {verb}", no_wait)
    result = st.rest.get(st.compute_path(compute_name)) if op is not None else created
    for warning in (result or {}).get("warnings") or []:
        text = warning.get("message", warning) if isinstance(warning, dict) else warning
        err_console.print(f"[yellow]WARNING:[/] {escape(str(text))}", highlight=False)
    st.emit(result, "compute")


@app.command("show")
def show(ctx: typer.Context, name: NameOpt) -> None:
    """Show one compute with its status fields."""
    st = state(ctx)
    body = st.rest.get(st.compute_path(name))
    st.emit(body, "compute")
    cluster = isinstance(body, dict) and body.get("type") == "amlcompute"
    if st.output is OutputFormat.table and st.query is None and cluster:
        # The pool's teams (issue 31); the table's last line has the hour's preemptions against
        # the cap (the view's ``preemptions`` figure, from the same count).
        table = fair_share_table.render(st.rest.get(st.compute_path(name) + "/fairShare"))
        if table:
            typer.echo("\n" + table, nl=False)


@app.command("list")
def list_(
    ctx: typer.Context,
    type_: Annotated[str | None, typer.Option("-t", "--type", help="Only computes of this type.")] = None,
) -> None:
    """List the workspace's computes."""
    st = state(ctx)
    items = st.rest.list_values(f"{st.ws_path()}/computes")
    if type_:
        items = [c for c in items if str(c.get("type", "")).lower() == type_.lower()]
    st.emit(items, "compute")


@app.command("list-nodes")
def list_nodes(ctx: typer.Context, name: NameOpt) -> None:
    """List a cluster's nodes with Azure's node states (idle, running, preparing, leaving, preempted,
    unusable) and the run each is busy with."""
    st = state(ctx)
    st.emit(st.rest.get(f"{st.compute_path(name)}/nodes")["nodes"], "node")


@app.command("evict")
def evict(
    ctx: typer.Context,
    name: NameOpt,
    node: Annotated[str, typer.Option("--node", help="Node id (see list-nodes).")],
) -> None:
    """Evict a low-priority node now (operators and tests); its jobs are requeued."""
    st = state(ctx)
    st.emit(st.rest.post(f"{st.compute_path(name)}/evict", {"node_id": node}), "node")


@app.command("update")
def update(
    ctx: typer.Context,
    name: NameOpt,
    min_instances: Annotated[int | None, typer.Option("--min-instances")] = None,
    max_instances: Annotated[int | None, typer.Option("--max-instances")] = None,
    idle_time_before_scale_down: Annotated[
        int | None, typer.Option("--idle-time-before-scale-down", help="Seconds.")
    ] = None,
    idle_time_before_shutdown_minutes: Annotated[
        int | None, typer.Option("--idle-time-before-shutdown-minutes", help="Instances only.")
    ] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    no_wait: NoWaitOpt = False,
    identity_type: IdentityTypeOpt = None,
    user_assigned_identities: UserIdentitiesOpt = None,
) -> None:
    """Change scale settings, idle times, the identity or the description of a compute."""
    st = state(ctx)
    body = {
        k: v
        for k, v in {
            "min_instances": min_instances,
            "max_instances": max_instances,
            "idle_time_before_scale_down": idle_time_before_scale_down,
            "idle_time_before_shutdown_minutes": idle_time_before_shutdown_minutes,
            "description": description,
            "identity": identity_of(identity_type, user_assigned_identities),
        }.items()
        if v is not None
    }
    if not body:
        raise ConfigurationError("nothing to update: pass at least one option (see --help)")
    response = st.rest.send("PATCH", st.compute_path(name), json=body)
    op = st.wait(response, f"compute '{name}' update", no_wait)
    st.emit(st.rest.get(st.compute_path(name)) if op is not None else response.json(), "compute")


def _action(ctx: typer.Context, name: str, method: str, suffix: str, label: str, no_wait: bool) -> None:
    st = state(ctx)
    response = st.rest.send(method, st.compute_path(name) + suffix)
    op = st.wait(response, f"compute '{name}' {label}", no_wait)
    if op is None:
        body = response.json() if response.content else None
        if body is not None:
            st.emit(body, "operation")
    elif st.output.value != "table":
        st.emit(op, "operation")


@app.command("delete")
def delete(
    ctx: typer.Context,
    name: NameOpt,
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Do not ask for confirmation.")] = False,
    no_wait: NoWaitOpt = False,
) -> None:
    """Delete a compute (its nodes are released; instance disks are removed)."""
    if not yes:
        typer.confirm(f"Delete compute '{name}'?", abort=True, err=True)
    _action(ctx, name, "DELETE", "", "delete", no_wait)


@app.command("attach")
def attach(
    ctx: typer.Context,
    file: Annotated[str, typer.Option("-f", "--file", help="The VM's YAML (type: virtualmachine).")],
    name: Annotated[str | None, typer.Option("-n", "--name", help="Name (overrides the file).")] = None,
    no_wait: NoWaitOpt = False,
) -> None:
    """Attach a machine reached over SSH (checks it, installs the agent; jobs then run there)."""
    create(ctx, file=file, name=name, no_wait=no_wait)


@app.command("detach")
def detach(
    ctx: typer.Context,
    name: NameOpt,
    yes: Annotated[bool, typer.Option("-y", "--yes", help="Do not ask for confirmation.")] = False,
    no_wait: NoWaitOpt = False,
) -> None:
    """Detach an attached VM: its agent and the agent's folder go; the machine stays as it was."""
    if not yes:
        typer.confirm(f"Detach compute '{name}'?", abort=True, err=True)
    _action(ctx, name, "DELETE", "", "detach", no_wait)


@app.command("start")
def start(ctx: typer.Context, name: NameOpt, no_wait: NoWaitOpt = False) -> None:
    """Start a stopped compute instance."""
    _action(ctx, name, "POST", "/start", "start", no_wait)


@app.command("stop")
def stop(ctx: typer.Context, name: NameOpt, no_wait: NoWaitOpt = False) -> None:
    """Stop a compute instance (its disk and quota are kept)."""
    _action(ctx, name, "POST", "/stop", "stop", no_wait)


@app.command("restart")
def restart(ctx: typer.Context, name: NameOpt, no_wait: NoWaitOpt = False) -> None:
    """Restart a compute instance."""
    _action(ctx, name, "POST", "/restart", "restart", no_wait)


@app.command("list-sizes")
def list_sizes(
    ctx: typer.Context,
    location: Annotated[str | None, typer.Option("-l", "--location")] = None,
    type_: Annotated[
        str | None, typer.Option("-t", "--type", help="Only sizes this compute type supports.")
    ] = None,
    include_retired: Annotated[bool, typer.Option("--include-retired")] = False,
) -> None:
    """List VM sizes (optionally for one location and compute type)."""
    st = state(ctx)
    params = {
        "location": location,
        "compute_type": type_,
        "include_retired": "true" if include_retired else None,
    }
    st.emit(st.rest.list_values(f"{API_PREFIX}/sizes", params=params), "size")


@app.command("list-usage")
def list_usage(
    ctx: typer.Context,
    location: Annotated[str | None, typer.Option("-l", "--location")] = None,
) -> None:
    """Core usage against quota per VM family in a location, with the computes holding cores."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{st.location_path(location)}/usages"), "usage")


app.command("what-if", help=WHAT_IF_HELP)(what_if)  # offline: the scale simulator, no server
