"""``cloudlet schedule …``, as ``az ml schedule``: create|update (--file, --set, --name), show,
list (--list-view-type enabled_only|disabled_only|all), enable, disable, delete. A schedule's
``create_job: ./job.yml`` is read and its code uploaded here, as ``job create --file`` does
(``client/schedules.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cloudlet.cli.az_flags import NoWaitOpt, YesOpt
from cloudlet.cli.compute import build_body, load_yaml_file, state
from cloudlet.cli.output import COLUMNS
from cloudlet.client._config import ConfigurationError
from cloudlet.client.operations import _Scope
from cloudlet.client.schedules import LIST_VIEWS, ScheduleOperations

app = typer.Typer(
    help="Job schedules: cron or recurrence triggers that submit a job (like `az ml schedule`)."
)


def _trigger_cell(doc: dict[str, Any]) -> str | None:
    trigger = doc.get("trigger") or {}
    if trigger.get("type") == "cron":
        return f"cron {trigger.get('expression')}"
    if trigger.get("type") == "recurrence":
        return f"every {trigger.get('interval')} {trigger.get('frequency')}"
    return None


COLUMNS.setdefault(
    "schedule",
    [
        ("NAME", lambda d: d.get("name")),
        ("ENABLED", lambda d: d.get("is_enabled")),
        ("TRIGGER", _trigger_cell),
        ("NEXT FIRE", lambda d: d.get("next_fire_time")),
        ("LAST JOB", lambda d: d.get("last_job_name")),
        ("LAST ERROR", lambda d: d.get("last_error")),
    ],
)

FileOpt = Annotated[str | None, typer.Option("-f", "--file", help="A schedule YAML file (- for stdin).")]
NameOpt = Annotated[str | None, typer.Option("-n", "--name", help="Name (overrides the file's).")]
RequiredName = Annotated[str, typer.Option("-n", "--name", help="The schedule's name.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="KEY.PATH=VALUE (YAML-typed), repeatable.")]


def _ops(ctx: typer.Context) -> ScheduleOperations:
    st = state(ctx)
    return ScheduleOperations(st.rest, _Scope(st.config))


def _write(ctx: typer.Context, file: str | None, name: str | None, sets: list[str] | None) -> None:
    ops = _ops(ctx)
    doc = load_yaml_file(file, "schedule") if file else {}
    if not file and name:  # update --set on the current document
        current = ops.get(name)._to_dict()
        doc = {k: v for k, v in current.items() if k in _DOCUMENT_FIELDS}
    try:
        body = build_body(doc, sets, None, name)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    if not body.get("name"):
        raise ConfigurationError("give the schedule's name: -n/--name or name: in --file")
    base = Path.cwd() if file in (None, "-") else Path(str(file)).resolve().parent
    try:
        written = ops.create_or_update(body, base_path=base)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    state(ctx).emit(written._to_dict(), "schedule")


_DOCUMENT_FIELDS = (
    "name",
    "display_name",
    "description",
    "tags",
    "properties",
    "trigger",
    "create_job",
    "is_enabled",
)


@app.command("create")
def create(
    ctx: typer.Context,
    file: FileOpt = None,
    name: NameOpt = None,
    set_: SetOpt = None,
    no_wait: NoWaitOpt = False,
) -> None:
    """Create (or replace) a schedule from its YAML file."""
    _write(ctx, file, name, set_)


@app.command("update")
def update(
    ctx: typer.Context,
    file: FileOpt = None,
    name: NameOpt = None,
    set_: SetOpt = None,
    no_wait: NoWaitOpt = False,
) -> None:
    """Replace a schedule's document, or change its fields (-n NAME --set trigger.expression='0 3 * * *')."""
    _write(ctx, file, name, set_)


@app.command("show")
def show(ctx: typer.Context, name: RequiredName) -> None:
    """Show a schedule, its next fire time and the last job it made."""
    state(ctx).emit(_ops(ctx).get(name)._to_dict(), "schedule")


@app.command("list")
def list_(
    ctx: typer.Context,
    list_view_type: Annotated[
        str, typer.Option("-t", "--list-view-type", help="enabled_only (the default), disabled_only or all.")
    ] = "enabled_only",
) -> None:
    """List the workspace's schedules."""
    if list_view_type.lower().replace("-", "_") not in LIST_VIEWS:
        raise ConfigurationError(f"--list-view-type {list_view_type}: use enabled_only, disabled_only or all")
    state(ctx).emit([s._to_dict() for s in _ops(ctx).list(list_view_type)], "schedule")


@app.command("enable")
def enable(ctx: typer.Context, name: RequiredName, no_wait: NoWaitOpt = False) -> None:
    """Enable a schedule: it fires from now on (what it missed while disabled is not replayed)."""
    state(ctx).emit(_ops(ctx).enable(name)._to_dict(), "schedule")


@app.command("disable")
def disable(ctx: typer.Context, name: RequiredName, no_wait: NoWaitOpt = False) -> None:
    """Disable a schedule: it makes no job until enabled again."""
    state(ctx).emit(_ops(ctx).disable(name)._to_dict(), "schedule")


@app.command("delete")
def delete(ctx: typer.Context, name: RequiredName, yes: YesOpt = False, no_wait: NoWaitOpt = False) -> None:
    """Delete a schedule (the jobs it made stay)."""
    _ops(ctx).delete(name)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="schedule")
