"""What a job's view reads beside the job itself, in one statement: its runs (per attempt and
rank), the asset versions it uses, its latest MLflow metrics and its params.

Job show is polled by clients; these were four statements (three through the ORM), and each
statement cost 30-65 µs of CPU in SQLAlchemy on top of the database's own work, more than the
rows, which are few (a command job has a run or two and mostly no asset, metric or param). One
``UNION ALL`` of plain rows, built once, reads them all: its columns are generic (``i*`` whole
numbers, ``f*`` floats, ``t*`` texts), each part filling those it has and NULL (cast, for
PostgreSQL's typing) the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Boolean, Float, Integer, Text, bindparam, literal_column, null, select, union_all
from sqlalchemy.orm import Session

from cloudlet.domain.tracking import tracking as rules
from cloudlet.store import db
from cloudlet.store.schema import AssetUse, JobRun, TrackingLatestMetric, TrackingParam, TrackingRun

_RUN, _USE, _METRIC, _PARAM = 0, 1, 2, 3


class RunRow(NamedTuple):
    """The fields of a ``JobRun`` that a job's view shows."""

    attempt: int
    node_id: str
    exit_code: int | None
    reason: str | None
    started_at: float | None
    ended_at: float | None


@dataclass
class JobDetails:
    runs: list[RunRow] = field(default_factory=list)
    assets: list[dict[str, Any]] = field(default_factory=list)  # field, role, kind, name, version of each use
    metrics: dict[str, Any] = field(default_factory=dict)  # ``tracking.job_view``'s
    params: dict[str, str] = field(default_factory=dict)


def _part(kind: int, **columns: Any) -> Any:
    """One part of the union: COLUMNS by generic name, the others NULL of their type."""
    types = {"i1": Integer, "i2": Integer, "i3": Integer, "f1": Float, "f2": Float, "b": Boolean}
    values: list[Any] = [literal_column(str(kind)).label("kind")]
    for name in ("i1", "i2", "i3", "f1", "f2", "t1", "t2", "t3", "t4", "t5", "b"):
        value = columns.get(name)
        values.append((value if value is not None else null().cast(types.get(name, Text))).label(name))
    return select(*values)


_JOB: Any = bindparam("job")
_DETAILS = union_all(
    _part(
        _RUN,
        i1=JobRun.attempt,
        i2=JobRun.rank,
        i3=JobRun.exit_code,
        f1=JobRun.started_at,
        f2=JobRun.ended_at,
        t1=JobRun.node_id,
        t2=JobRun.reason,
    ).where(JobRun.job_id == _JOB),
    _part(
        _USE,
        i1=AssetUse.id,
        t1=AssetUse.field,
        t2=AssetUse.role,
        t3=AssetUse.kind,
        t4=AssetUse.name,
        t5=AssetUse.version,
    ).where(AssetUse.job_id == _JOB),
    _part(_METRIC, f1=TrackingLatestMetric.value, t1=TrackingLatestMetric.key, b=TrackingLatestMetric.is_nan)
    .join(TrackingRun, TrackingRun.id == TrackingLatestMetric.run_id)
    .where(TrackingRun.job_id == _JOB),
    _part(_PARAM, t1=TrackingParam.key, t2=TrackingParam.value)
    .join(TrackingRun, TrackingRun.id == TrackingParam.run_id)
    .where(TrackingRun.job_id == _JOB),
).order_by(literal_column("kind"), literal_column("i1"), literal_column("i2"))


def of_job(session: Session, job_id: int) -> JobDetails:
    """JOB_ID's runs (by attempt, then rank), asset uses (in the order recorded), latest metrics
    and params (each by key)."""
    details = JobDetails()
    metrics: dict[str, Any] = {}
    params: dict[str, str] = {}
    for kind, _i1, _i2, i3, f1, f2, t1, t2, t3, t4, t5, b in db.rows_connection(session).execute(
        _DETAILS, {"job": job_id}
    ):
        if kind == _RUN:
            details.runs.append(RunRow(_i1, t1, i3, t2, f1, f2))
        elif kind == _USE:
            details.assets.append({"field": t1, "role": t2, "kind": t3, "name": t4, "version": t5})
        elif kind == _METRIC:
            metrics[t1] = rules.wire_value(math.nan if b else f1)
        else:
            params[t1] = t2
    details.metrics = dict(sorted(metrics.items()))
    details.params = dict(sorted(params.items()))
    return details
