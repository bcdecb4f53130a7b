"""A workspace's usage and cost by day, per compute and user (issue 28 item 6; T10).

No ledger is needed: node rows are never deleted (each keeps when it was made and when it ended,
``nodes.created_at`` / ``ended_at``), and ``job_runs`` keeps which job ran on which node when. This
reads those intervals and the workspace's compute instances (their OS disks), prices them from the
size catalogue (``costs``: the low-priority price for such nodes, Premium SSD for disks) and leaves
the arithmetic to ``domain/compute/usage.py``.

Known gaps: a node is counted from when it was requested (a provider may take a little longer to
make it); a deleted instance's disk is no longer counted (its row is gone); a deleted cluster's
nodes are, under ``#<id>``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, date, datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute import costs
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.compute.sizes import Catalogue
from cloudlet.domain.compute.usage import BusySpan, DiskSpan, NodeSpan, Total, UsageRow, totals, usage_by_day
from cloudlet.domain.resources import COMPUTES
from cloudlet.services.access import workspaces
from cloudlet.services.compute import instances
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.store.schema import Compute, Job, JobRun, Node

DAY_S = 86_400.0
SERVERLESS = "serverless"  # what nodes made for one job (not a compute's) are listed under


@dataclass(frozen=True)
class Usage:
    since: float
    until: float
    days: list[date]
    rows: list[UsageRow]
    by_compute: list[Total]
    by_user: list[Total]


def _price(catalogue: Catalogue, size: str, tier: str) -> float:
    found = catalogue.get(size)
    if found is None:
        return 0.0
    if tier == Tier.LOW_PRIORITY.value and found.price_low_priority is not None:
        return found.price_low_priority
    return found.price_dedicated


def intervals(
    session: Session, workspace_id: int, since: float, until: float, now: float, catalogue: Catalogue
) -> tuple[list[NodeSpan], list[BusySpan], list[DiskSpan]]:
    """The workspace's node lives, job runs and instance disks that touch [since, until)."""
    computes = {c.id: c for c in session.scalars(select(Compute).where(Compute.workspace_id == workspace_id))}
    # The nodes in the window, and through the same filter (a join, never a list of ids that a
    # busy month would make longer than a statement may bind) their job runs and serverless jobs.
    in_window = and_(
        Node.workspace_id == workspace_id,
        Node.created_at < until,
        or_(Node.ended_at.is_(None), Node.ended_at > since),
    )
    node_rows = list(
        session.execute(
            select(
                Node.id, Node.owner_type, Node.owner_id, Node.size, Node.tier, Node.created_at, Node.ended_at
            ).where(in_window)
        )
    )
    runs = (
        session.execute(
            select(
                JobRun.node_id,
                Job.created_by,
                func.coalesce(JobRun.started_at, JobRun.assigned_at).label("start"),
                JobRun.ended_at,
            )
            .join(Node, Node.id == JobRun.node_id)
            .join(Job, Job.id == JobRun.job_id)
            .where(in_window)
        )
        .tuples()
        .all()
    )
    # Serverless nodes belong to one job each: its submitter's.
    job_owner: dict[int, str] = dict(
        session.execute(
            select(Job.id, Job.created_by)
            .join(Node, and_(Node.owner_type != COMPUTES, Node.owner_id == Job.id))
            .where(in_window)
        )
        .tuples()
        .all()
    )
    nodes: list[NodeSpan] = []
    for row in node_rows:
        compute = computes.get(row.owner_id) if row.owner_type == COMPUTES else None
        if row.owner_type == COMPUTES:
            name = compute.name if compute is not None else f"#{row.owner_id}"
            owner = (compute.owner or compute.created_by) if compute is not None else "(unknown)"
        else:
            name, owner = SERVERLESS, job_owner.get(row.owner_id, "(unknown)")
        price = _price(catalogue, row.size, row.tier)
        nodes.append(NodeSpan(row.id, name, owner, price, row.created_at, row.ended_at or now))
    busy = [BusySpan(node_id, user, start, end or now) for node_id, user, start, end in runs]
    disk_rate = instances.os_disk_gb() * costs.OS_DISK_USD_PER_GB_MONTH / costs.HOURS_PER_MONTH
    disks = [
        DiskSpan(c.name, c.owner or c.created_by, disk_rate, c.created_on.timestamp(), now)
        for c in computes.values()
        if c.type == ComputeType.COMPUTE_INSTANCE.value
    ]
    return nodes, busy, disks


def workspace_usage(
    session: Session,
    caller: Caller,
    ref: WorkspaceRef,
    days: int,
    catalogue: Catalogue,
    now: float | None = None,
) -> Usage:
    """The last DAYS UTC days (today included) of the workspace the caller may read."""
    workspace = workspaces.resolve(session, ref, caller, Access.READ)
    now = time.time() if now is None else now
    today = (now // DAY_S) * DAY_S
    since, until = today - (days - 1) * DAY_S, now
    nodes, busy, disks = intervals(session, workspace.id, since, until, now, catalogue)
    rows = usage_by_day(nodes, busy, disks, since, until)
    window = [datetime.fromtimestamp(since + i * DAY_S, UTC).date() for i in range(days)]
    return Usage(since, until, window, rows, totals(rows, "compute"), totals(rows, "user"))
