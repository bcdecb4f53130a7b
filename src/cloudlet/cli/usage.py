"""``cloudlet usage --idle``: idle node-hours and GPU-hours per user and compute."""

from __future__ import annotations

from typing import Annotated

import typer

from cloudlet.cli.compute import state
from cloudlet.cli.output import COLUMNS
from cloudlet.client.operations import _Scope

app = typer.Typer(help="What the workspace's nodes and GPUs were used for, and what sat idle.")

COLUMNS.setdefault(
    "usage-idle",
    [
        ("USER", lambda d: d.get("user")),
        ("COMPUTE", lambda d: d.get("compute")),
        ("NODE_HOURS", lambda d: f"{d.get('node_hours', 0):.2f}"),
        ("IDLE_NODE_HOURS", lambda d: f"{d.get('idle_node_hours', 0):.2f}"),
        ("GPU_HOURS", lambda d: f"{d.get('gpu_hours', 0):.2f}"),
        ("IDLE_GPU_HOURS", lambda d: f"{d.get('idle_gpu_hours', 0):.2f}"),
    ],
)


@app.callback(invoke_without_command=True)
def usage(
    ctx: typer.Context,
    idle: Annotated[
        bool, typer.Option("--idle", help="Idle node-hours and GPU-hours per user and compute.")
    ] = False,
    days: Annotated[
        int, typer.Option("--days", min=1, max=366, help="The last DAYS UTC days, today included.")
    ] = 30,
) -> None:
    """Node-hours and GPU-hours per user and compute, idle ones beside them (GPU-hours: from the
    jobs' resource samples; a GPU under 5 % utilisation is idle)."""
    if not idle:
        raise typer.BadParameter("say what to report: --idle", param_hint="--idle")
    st = state(ctx)
    path = f"{_Scope(st.config).ws_path()}/usage/idle"
    found = st.rest.get(path, params={"days": days}) or {}
    st.emit(found.get("value") or [], "usage-idle")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="usage")
