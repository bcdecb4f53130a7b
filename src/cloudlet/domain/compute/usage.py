"""Node-hours, idle node-hours, disk-hours and cost by UTC day, per compute and user (pure; T10).

The store supplies intervals (``services/compute/usage.py``): each node's life (made → ended, or
now) with its hourly price, the spans jobs ran on it, and each compute instance's OS disk (it
exists, and is billed, whether the instance runs or not). Here they are cut at UTC midnights and
summed. A node's time with a job on it is that job's submitter's; its time with none is idle, and
is the node's owner's (a cluster's creator: they set its minimum nodes and idle time; an instance's
owner). Where jobs overlap on one node (an instance runs them side by side) the earliest-started
one has the time: an hour is counted once.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime

DAY_S = 86_400.0
HOUR_S = 3_600.0


@dataclass(frozen=True, slots=True)
class NodeSpan:
    """A node's life: what it belongs to, whose its idle time is, what an hour of it costs."""

    node_id: str
    compute: str
    owner: str
    usd_per_hour: float
    start: float  # epoch seconds
    end: float


@dataclass(frozen=True, slots=True)
class BusySpan:
    """A job's run on a node, and who submitted the job."""

    node_id: str
    user: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class DiskSpan:
    """A compute instance's OS disk: billed from the instance's creation, running or stopped."""

    compute: str
    user: str
    usd_per_hour: float
    start: float
    end: float


@dataclass
class UsageRow:
    day: date
    compute: str
    user: str
    node_hours: float = 0.0
    idle_node_hours: float = 0.0
    disk_hours: float = 0.0
    cost: float = 0.0


def day_pieces(start: float, end: float) -> list[tuple[date, float]]:
    """[start, end) cut at UTC midnights: (the day, seconds in it), in order."""
    out: list[tuple[date, float]] = []
    at = start
    while at < end:
        midnight = (math.floor(at / DAY_S) + 1) * DAY_S
        cut = min(end, midnight)
        out.append((datetime.fromtimestamp(at, UTC).date(), cut - at))
        at = cut
    return out


def _segments(node: NodeSpan, busy: list[BusySpan]) -> list[tuple[float, float, str | None]]:
    """The node's life as (start, end, the user whose job ran, or None: idle)."""
    inside = sorted(
        (max(b.start, node.start), min(b.end, node.end), b.user)
        for b in busy
        if b.end > node.start and b.start < node.end and b.end > b.start
    )
    out: list[tuple[float, float, str | None]] = []
    at = node.start
    for start, end, user in inside:
        if end <= at:
            continue  # wholly under an earlier job's time
        if start > at:
            out.append((at, start, None))
            at = start
        out.append((at, end, user))
        at = end
    if at < node.end:
        out.append((at, node.end, None))
    return out


def usage_by_day(
    nodes: Iterable[NodeSpan],
    busy: Iterable[BusySpan],
    disks: Iterable[DiskSpan],
    since: float,
    until: float,
) -> list[UsageRow]:
    """Per (day, compute, user) in [since, until): node-hours (idle ones among them), disk-hours
    and their cost (USD), sorted by day, compute, user."""
    rows: dict[tuple[date, str, str], UsageRow] = {}

    def row(day: date, compute: str, user: str) -> UsageRow:
        key = (day, compute, user)
        if key not in rows:
            rows[key] = UsageRow(day, compute, user)
        return rows[key]

    by_node: dict[str, list[BusySpan]] = defaultdict(list)
    for span in busy:
        by_node[span.node_id].append(span)
    for node in nodes:
        clipped = NodeSpan(
            node.node_id,
            node.compute,
            node.owner,
            node.usd_per_hour,
            max(node.start, since),
            min(node.end, until),
        )
        if clipped.end <= clipped.start:
            continue
        for start, end, user in _segments(clipped, by_node.get(node.node_id, [])):
            for day, seconds in day_pieces(start, end):
                hours = seconds / HOUR_S
                target = row(day, node.compute, user if user is not None else node.owner)
                target.node_hours += hours
                if user is None:
                    target.idle_node_hours += hours
                target.cost += hours * node.usd_per_hour
    for disk in disks:
        for day, seconds in day_pieces(max(disk.start, since), min(disk.end, until)):
            hours = seconds / HOUR_S
            target = row(day, disk.compute, disk.user)
            target.disk_hours += hours
            target.cost += hours * disk.usd_per_hour
    return [rows[key] for key in sorted(rows)]


@dataclass
class Total:
    name: str
    node_hours: float = 0.0
    idle_node_hours: float = 0.0
    disk_hours: float = 0.0
    cost: float = 0.0


def totals(rows: Iterable[UsageRow], by: str) -> list[Total]:
    """The rows summed per ``compute`` or ``user`` (``by``), the biggest cost first."""
    sums: dict[str, Total] = {}
    for r in rows:
        name = r.compute if by == "compute" else r.user
        total = sums.setdefault(name, Total(name))
        total.node_hours += r.node_hours
        total.idle_node_hours += r.idle_node_hours
        total.disk_hours += r.disk_hours
        total.cost += r.cost
    return sorted(sums.values(), key=lambda t: (-t.cost, -t.node_hours, t.name))
