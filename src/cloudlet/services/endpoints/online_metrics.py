"""A deployment's request metrics in the store (issue 26): every worker's gateway counts in
memory and adds what it counted since its last flush to the deployment's one row; ``show`` reads
that row (plus what this worker has not flushed yet), so it counts requests sent through any
worker of any server, and they outlive a restart."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from cloudlet.store.schema import OnlineDeploymentMetrics

# The latencies of a deployment's last requests through this worker's gateway (wall time, ms): the
# window the studio's latency percentiles are read from. Counts are the store's (every worker's);
# percentiles are this worker's own, which is every request on a one-worker server.
RECENT_SAMPLES = 4096
LatencySamples = deque[tuple[float, float]]


@dataclass(frozen=True)
class Counts:
    requests: int = 0
    failures: int = 0
    latency_ms: float = 0.0

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.requests + other.requests,
            self.failures + other.failures,
            self.latency_ms + other.latency_ms,
        )

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.requests - other.requests,
            self.failures - other.failures,
            self.latency_ms - other.latency_ms,
        )

    def __bool__(self) -> bool:
        return bool(self.requests or self.failures)


def add(session: Session, deployment_id: int, counts: Counts) -> None:
    """Add COUNTS to the deployment's row (made on first use); a deleted deployment's are dropped."""
    added = session.execute(
        update(OnlineDeploymentMetrics)
        .where(OnlineDeploymentMetrics.deployment_id == deployment_id)
        .values(
            requests=OnlineDeploymentMetrics.requests + counts.requests,
            failures=OnlineDeploymentMetrics.failures + counts.failures,
            latency_ms=OnlineDeploymentMetrics.latency_ms + counts.latency_ms,
        )
    )
    if getattr(added, "rowcount", 0):
        return
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    values = {
        "deployment_id": deployment_id,
        "requests": counts.requests,
        "failures": counts.failures,
        "latency_ms": counts.latency_ms,
    }
    table = OnlineDeploymentMetrics.__table__
    made = dialect.insert(table).values(**values)
    # Two workers may make the row at once: the second adds to the first's.
    session.execute(
        made.on_conflict_do_update(
            index_elements=[table.c.deployment_id],
            set_={
                "requests": table.c.requests + counts.requests,
                "failures": table.c.failures + counts.failures,
                "latency_ms": table.c.latency_ms + counts.latency_ms,
            },
        )
    )


def stored(session: Session, deployment_id: int) -> Counts:
    row = session.get(OnlineDeploymentMetrics, deployment_id)
    return Counts() if row is None else Counts(row.requests, row.failures, row.latency_ms)


def latency_samples() -> LatencySamples:
    return deque(maxlen=RECENT_SAMPLES)


def _rank(ordered: list[float], percent: float) -> float | None:
    """The nearest-rank percentile of ORDERED (sorted); None when there is no sample."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(percent / 100 * len(ordered)) - 1)]


def percentiles(samples: Iterable[tuple[float, float]], since: float) -> dict[str, float | int | None]:
    """p50 and p95 latency (ms) of the samples taken after SINCE (wall time), and their number."""
    ordered = sorted(ms for at, ms in samples if at > since)
    p50, p95 = _rank(ordered, 50), _rank(ordered, 95)
    return {
        "p50_ms": None if p50 is None else round(p50, 1),
        "p95_ms": None if p95 is None else round(p95, 1),
        "sampled": len(ordered),
    }
