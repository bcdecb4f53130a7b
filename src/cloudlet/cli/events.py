"""``cloudlet events [--since N] [--watch] [--type job] [--compute X]``: the lifecycle events feed."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from cloudlet.cli.compute import state
from cloudlet.cli.output import OutputFormat, event_time
from cloudlet.client.events import EventOperations
from cloudlet.client.operations import _Scope

TYPES = "job, compute, node, operation or deployment"


def events(
    ctx: typer.Context,
    since: Annotated[
        int | None,
        typer.Option("--since", min=0, help="The last sequence number seen (default: the oldest kept)."),
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Follow new events as they happen.")] = False,
    type: Annotated[str | None, typer.Option("--type", help=f"Only this kind: {TYPES}.")] = None,
    compute: Annotated[str | None, typer.Option("--compute", help="Only events of this compute.")] = None,
    all_workspaces: Annotated[
        bool, typer.Option("--all-workspaces", help="Every workspace's (admin).")
    ] = False,
    top: Annotated[int, typer.Option("--top", min=1, help="At most this many (without --watch).")] = 1000,
) -> None:
    """Lifecycle events (jobs, computes, nodes, operations, deployments) after a sequence number,
    oldest first; --watch follows them (one line each; reconnects without missing any)."""
    st = state(ctx)
    feed = EventOperations(st.rest, _Scope(st.config))
    if not watch:
        found = []
        for event in feed.list(since, type=type, compute=compute, all_workspaces=all_workspaces):
            found.append(event)
            if len(found) >= top:
                break
        st.emit(found, "events")
        return
    for event in feed.watch(since, type=type, compute=compute, all_workspaces=all_workspaces):
        if st.output in (OutputFormat.json, OutputFormat.jsonc):
            line = json.dumps(event, separators=(",", ":"))
        else:
            moved = f"{event.get('from_state') or '-'} -> {event['to_state']}"
            where = f" [{event['compute']}]" if event.get("compute") else ""
            line = f"{event['seq']}\t{event_time(event)}\t{event['type']}\t{event['name']}{where}\t{moved}"
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("events")(events)
