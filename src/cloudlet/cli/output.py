"""Rendering of server JSON as a rich table, JSON or YAML, and of errors for stderr.

JSON and YAML print the server's objects unchanged (a list prints as an array of objects), so
scripts can parse them; tables pick a few columns per resource kind.
"""

from __future__ import annotations

import io
import json
import sys
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TextIO

import jmespath
import jmespath.exceptions
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cloudlet.client._rest import HttpResponseError

err_console = Console(stderr=True)


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"
    tsv = "tsv"  # az's: values only, tab-separated, a row per item (for VAR=$(… --query name -o tsv))
    jsonc = "jsonc"  # az's coloured JSON: plain JSON here


def compile_query(expression: str) -> Any:
    """A JMESPath expression, or ValueError naming what is wrong with it."""
    try:
        return jmespath.compile(expression)
    except jmespath.exceptions.JMESPathError as exc:
        hint = 'e.g. --query name or --query "[].name"'
        raise ValueError(f"not a JMESPath expression ({exc}); {hint}") from exc


def apply_query(data: Any, expression: str) -> Any:
    # Ordered: a multiselect hash ({Name:name, Id:id}) keeps its order in tsv, as in az.
    return compile_query(expression).search(data, jmespath.Options(dict_cls=OrderedDict))


def _tsv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return str(len(value))  # az writes a nested list's length, a nested object as nothing
    if isinstance(value, dict):
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def dump_tsv(data: Any) -> str:
    """az's tsv: a line per item of a list (the result itself otherwise); an object's values in its
    order when ordered (a --query projection), else by sorted key; nested values flattened."""
    lines = []
    for item in data if isinstance(data, list) else [data]:
        if isinstance(item, OrderedDict):
            values = list(item.values())
        elif isinstance(item, dict):
            values = [value for _, value in sorted(item.items())]
        elif isinstance(item, list):
            values = item
        else:
            values = [item]
        lines.append("\t".join(_tsv_cell(v) for v in values))
    return "".join(line + "\n" for line in lines)


Getter = Callable[[dict[str, Any]], Any]


def _dash(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def compute_state(c: dict[str, Any]) -> str:
    """``provisioning/state/allocation``, skipping the parts a compute type does not have."""
    parts = [c.get("provisioning_state"), c.get("state"), c.get("allocation_state")]
    text = "/".join(str(p) for p in parts if p) or "-"
    if c.get("scaling_blocked"):
        text += " (scaling blocked)"
    return text


def compute_nodes(c: dict[str, Any]) -> str:
    current, target = c.get("current_node_count"), c.get("target_node_count")
    if current is None and target is None:
        return "-"
    return f"{_dash(current)}/{_dash(target)}"


def size_supported(s: dict[str, Any]) -> str:
    if s.get("retired_on"):
        return f"retired {s['retired_on']}"
    return ",".join(s.get("supported_compute_types") or []) or "-"


def size_low_priority(s: dict[str, Any]) -> str:
    if s.get("low_priority_capable") is False:
        return "-"
    return _dash(s.get("price_low_priority"))


def usage_holders(u: dict[str, Any]) -> str:
    holders = []
    for h in u.get("holders") or []:
        text = f"{h.get('workspace')}/{h.get('compute')}:{h.get('cores')}"
        if h.get("state"):
            text += f" ({h['state']})"
        holders.append(text)
    return ", ".join(holders) or "-"


def operation_error_text(o: dict[str, Any]) -> str:
    err = o.get("error")
    if isinstance(err, dict):
        return f"({err.get('code')}) {err.get('message')}"
    return "-"


def _key(name: str) -> Getter:
    return lambda d: d.get(name)


def event_time(e: dict[str, Any]) -> str:
    return datetime.fromtimestamp(float(e.get("at") or 0), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def traffic_text(e: dict[str, Any]) -> str:
    traffic = e.get("traffic") or {}
    if not isinstance(traffic, dict):
        return "-"
    return ", ".join(f"{name}={share}%" for name, share in traffic.items())


REASON_WIDTH = 100


def reason_summary(d: dict[str, Any]) -> str | None:
    """A deployment's failure reason in a cell: its first line, cut short; the whole log is
    ``online-deployment get-logs``'s."""
    reason = d.get("reason")
    if not reason:
        return None
    lines = str(reason).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > REASON_WIDTH or len(lines) > 1:
        return first[:REASON_WIDTH].rstrip() + " … (more: get-logs)"
    return first


def model_name(d: dict[str, Any]) -> Any:
    model = d.get("model")
    if isinstance(model, dict):
        return model.get("name") or model.get("path") or "inline"
    return model


COLUMNS: dict[str, list[tuple[str, Getter]]] = {
    "compute": [
        ("NAME", _key("name")),
        ("TYPE", _key("type")),
        ("SIZE", _key("size")),
        ("LOCATION", _key("location")),
        ("STATE", compute_state),
        ("NODES", compute_nodes),
    ],
    "size": [
        ("NAME", _key("name")),
        ("SERIES", _key("series")),
        ("VCPUS", _key("vcpus")),
        ("MEMORY_GB", _key("memory_gb")),
        ("GPUS", _key("gpus")),
        ("PRICE/H", _key("price_dedicated")),
        ("LOW-PRI", size_low_priority),
        ("SUPPORTED", size_supported),
    ],
    "usage": [
        ("NAME", _key("name")),
        ("CURRENT", _key("current_value")),
        ("LIMIT", _key("limit")),
        ("HOLDERS", usage_holders),
    ],
    "quota": [("NAME", _key("name")), ("LIMIT", _key("limit")), ("UNIT", _key("unit"))],
    "delivery": [
        ("KIND", _key("kind")),
        ("TARGET", _key("target")),
        ("EVENT", _key("event")),
        ("STATE", _key("state")),
        ("ATTEMPTS", _key("attempts")),
        ("LAST", _key("lastStatus")),
        ("ERROR", _key("lastError")),
    ],
    "location": [
        ("NAME", _key("name")),
        ("PROVIDER", _key("provider")),
        ("CONFIG", _key("config")),
        ("VCPUS", lambda d: (d.get("capacity") or {}).get("vcpus")),
        ("MEMORY_GB", lambda d: (d.get("capacity") or {}).get("memory_gb")),
        ("GPUS", lambda d: (d.get("capacity") or {}).get("gpus")),
        ("OVERCOMMIT", lambda d: (d.get("capacity") or {}).get("overcommit")),
    ],
    "node": [
        ("NODE_ID", _key("nodeId")),
        ("STATE", _key("nodeState")),
        ("LIFECYCLE", _key("state")),
        ("TIER", _key("tier")),
        ("RUN_ID", _key("runId")),
        ("ERROR", lambda d: (d.get("error") or {}).get("message") or d.get("status_message")),
    ],
    "lock": [
        ("NAME", _key("name")),
        ("LEVEL", _key("level")),
        ("SCOPE", lambda d: d.get("scope") or d.get("id")),
        ("NOTES", _key("notes")),
        ("INHERITED", _key("inherited")),
    ],
    "workspace": [
        ("NAME", _key("name")),
        ("RESOURCE_GROUP", _key("resource_group")),
        ("LOCATION", _key("location")),
        ("DESCRIPTION", _key("description")),
    ],
    "principal": [
        ("NAME", _key("name")),
        ("ADMIN", _key("is_admin")),
        ("ENABLED", _key("enabled")),
        ("CREATED", _key("created_on")),
    ],
    "apikey": [
        ("ID", _key("id")),
        ("PREFIX", _key("prefix")),
        ("STATE", _key("state")),
        ("CREATED", _key("created_on")),
        ("EXPIRES", _key("expires_on")),
        ("LAST_USED", _key("last_used_on")),
        ("REPLACED_BY", _key("replaced_by")),
    ],
    "role": [("PRINCIPAL", _key("principal")), ("ROLE", _key("role")), ("WORKSPACE", _key("workspace"))],
    "audit": [
        ("TIME", _key("time")),
        ("ACTOR", _key("actor")),
        ("ACTION", _key("action")),
        ("TARGET", _key("target")),
        ("CHANNEL", _key("channel")),
        ("DETAILS", _key("details")),
    ],
    "events": [
        ("SEQ", _key("seq")),
        ("TIME", event_time),
        ("TYPE", _key("type")),
        ("NAME", _key("name")),
        ("COMPUTE", _key("compute")),
        ("FROM", _key("from_state")),
        ("TO", _key("to_state")),
    ],
    "online-endpoint": [
        ("NAME", _key("name")),
        ("STATE", _key("provisioning_state")),
        ("AUTH", _key("auth_mode")),
        ("TRAFFIC", traffic_text),
        ("SCORING_URI", _key("scoring_uri")),
    ],
    "online-deployment": [
        ("NAME", _key("name")),
        ("ENDPOINT", _key("endpoint_name")),
        ("STATE", _key("provisioning_state")),
        ("STAGE", _key("stage")),
        ("SIZE", _key("instance_type")),
        ("INSTANCES", _key("instance_count")),
        ("MODEL", model_name),
        ("REASON", reason_summary),
    ],
    "operation": [
        ("ID", _key("id")),
        ("KIND", _key("kind")),
        ("STATUS", _key("status")),
        ("TARGET", lambda d: d.get("target_name") or d.get("target")),
        ("ERROR", operation_error_text),
    ],
}


def table_rows(items: list[dict[str, Any]], kind: str | None) -> tuple[list[str], list[list[str]]]:
    """Headers and stringified cells for a list of objects (generic: scalar keys of the first)."""
    columns = COLUMNS.get(kind or "")
    if columns is None:
        keys: list[str] = []
        for item in items:
            for k, v in item.items():
                if k not in keys and not isinstance(v, dict | list):
                    keys.append(k)
        columns = [(k.upper(), _key(k)) for k in keys]
    headers = [h for h, _ in columns]
    rows = [[_dash(get(item)) for _, get in columns] for item in items]
    return headers, rows


_WRAPPING = frozenset(
    {"HOLDERS", "NOTES", "SCOPE", "DESCRIPTION", "ERROR", "SUPPORTED", "TARGET", "DETAILS"}
    | {"REASON", "TRAFFIC"}
)


def build_table(data: Any, kind: str | None = None) -> Table:
    if isinstance(data, dict):  # one object: a vertical FIELD / VALUE table
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("FIELD", no_wrap=True)
        table.add_column("VALUE", overflow="fold")
        for key, value in data.items():
            table.add_row(key, _dash(value))
        return table
    items = [i for i in (data or []) if isinstance(i, dict)]
    headers, rows = table_rows(items, kind)
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    for header in headers:
        wrap = header in _WRAPPING
        table.add_column(header, overflow="fold" if wrap else "ellipsis", no_wrap=not wrap)
    for row in rows:
        table.add_row(*row)
    return table


def _json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=2, default=_json_default)


def dump_yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)


def render(
    data: Any,
    fmt: OutputFormat | str,
    kind: str | None = None,
    stream: TextIO | None = None,
    query: str | None = None,
) -> None:
    """Print ``data`` (server JSON) to stdout in ``fmt``, filtered by the JMESPath ``query``."""
    out = stream or sys.stdout
    fmt = OutputFormat(fmt)
    if query is not None:
        data = apply_query(data, query)
        kind = None  # a projection has its own shape: generic columns
    if fmt is OutputFormat.tsv:
        out.write(dump_tsv(data))
    elif fmt in (OutputFormat.json, OutputFormat.jsonc):
        out.write(dump_json(data) + "\n")
    elif fmt is OutputFormat.yaml:
        out.write(dump_yaml(data))
    else:
        if isinstance(data, list) and not data:
            return
        scalars = isinstance(data, list) and all(not isinstance(i, dict) for i in data)
        if scalars or not isinstance(data, dict | list):
            out.write(dump_tsv(data))  # a scalar or a list of scalars (a --query result) as they are
            out.flush()
            return
        # Not a terminal (pipe, file): do not squeeze tables into 80 columns.
        tty = out.isatty()
        console = Console(file=io.StringIO(), width=None if tty else 250, force_terminal=tty)
        console.print(build_table(data, kind))
        text = console.file.getvalue()  # type: ignore[attr-defined]
        out.write("\n".join(line.rstrip() for line in text.splitlines()) + "\n")
    out.flush()


def format_error(exc: BaseException) -> str:
    """``(Code) message`` plus ``Target: …`` for server errors; the message otherwise."""
    if isinstance(exc, HttpResponseError):
        text = f"({exc.error.code}) {exc.error.message}"
        if exc.error.target:
            text += f"\nTarget: {exc.error.target}"
        return text
    return str(exc) or type(exc).__name__


def print_error(exc: BaseException | str) -> None:
    text = exc if isinstance(exc, str) else format_error(exc)
    err_console.print(f"[bold red]ERROR:[/] {escape(text)}", highlight=False, soft_wrap=True)
