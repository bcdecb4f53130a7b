"""Experiment tracking (MLflow's tracking API, served by api/mlflow/): experiments, runs, and what
runs log, in cloudlet's own store.

A job IS a run, as on Azure ML: its run id is the job's name, its experiment the job's
``experiment_name`` (else ``Default``). The run's row is made on the first write that names it
(``run_for_write``); until then reads render it from the job alone. A job's run's status and
times follow its job (``domain.tracking.tracking.run_status``); other runs keep their own.

Others read metrics by SQL through the three functions at the top (sweeps: early termination
and the best trial; ``job show``): ``latest_metrics``, ``metric_history``, ``params``, keyed by
``jobs.id``.

Experiments are in ``tracking_experiments``, reading and searching runs in ``tracking_reads``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Boolean, Float, Text, and_, bindparam, delete, literal_column, null, select, union_all
from sqlalchemy.orm import Session

from cloudlet.domain.tracking import tracking as rules
from cloudlet.domain.tracking.tracking import invalid, not_found
from cloudlet.services.access import workspaces
from cloudlet.services.access.workspaces import tracking_uri
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.tracking.tracking_experiments import (
    ACTIVE,
    DEFAULT_EXPERIMENT,
    DEFAULT_EXPERIMENT_ID,
    experiment_external_id,
    experiment_for_write,
    experiment_named,
    find_by_name,
    inserted,
    now_ms,
)
from cloudlet.store.schema import (
    Job,
    TrackingExperiment,
    TrackingLatestMetric,
    TrackingMetric,
    TrackingParam,
    TrackingRun,
    TrackingTag,
    Workspace,
)


# -- what others read (keyed by jobs.id) ------------------------------------------------------------
def latest_metrics(session: Session, job_ids: Sequence[int]) -> dict[int, dict[str, float]]:
    """Each job's metrics' latest values (highest step, then timestamp); jobs that logged none
    are absent."""
    found: dict[int, dict[str, float]] = {}
    if not job_ids:
        return found
    rows = session.execute(
        select(
            TrackingRun.job_id,
            TrackingLatestMetric.key,
            TrackingLatestMetric.value,
            TrackingLatestMetric.is_nan,
        )
        .join(TrackingLatestMetric, TrackingLatestMetric.run_id == TrackingRun.id)
        .where(TrackingRun.job_id.in_(list(job_ids)))
    )
    for job_id, key, value, is_nan in rows:
        found.setdefault(job_id or 0, {})[key] = math.nan if is_nan else value
    return found


def metric_history(session: Session, job_ids: Sequence[int], key: str) -> dict[int, list[tuple[int, float]]]:
    """Each job's values of metric KEY as (step, value), ordered by step, then timestamp."""
    found: dict[int, list[tuple[int, float]]] = {}
    if not job_ids:
        return found
    rows = session.execute(
        select(TrackingRun.job_id, TrackingMetric.step, TrackingMetric.value, TrackingMetric.is_nan)
        .join(TrackingMetric, TrackingMetric.run_id == TrackingRun.id)
        .where(TrackingRun.job_id.in_(list(job_ids)), TrackingMetric.key == key)
        .order_by(TrackingRun.job_id, TrackingMetric.step, TrackingMetric.timestamp, TrackingMetric.id)
    )
    for job_id, step, value, is_nan in rows:
        found.setdefault(job_id or 0, []).append((step, math.nan if is_nan else value))
    return found


@dataclass(frozen=True)
class MetricPoint:
    id: int  # the point's row id: in the order points were logged, a stream's resume point
    job_id: int
    key: str
    step: int
    value: float


def metric_points_after(
    session: Session, job_ids: Sequence[int], after: int, limit: int, recent: bool = False
) -> list[MetricPoint]:
    """The values JOB_IDS logged after point AFTER (a ``MetricPoint.id``; 0: all), in the order
    they were logged, at most LIMIT: what a live chart appends. RECENT: AFTER is one of the last
    points logged (a poll that caught up), so few points, if any, follow it."""
    if not job_ids:
        return []
    runs = dict(
        session.execute(
            select(TrackingRun.id, TrackingRun.job_id).where(TrackingRun.job_id.in_(list(job_ids)))
        ).all()
    )
    if not runs:
        return []
    # A history: the runs' own points (by the run index). Recent points: those logged since, by id
    # (``run_id + 0`` keeps the planner off the run index, which would read every point of the run
    # at each poll: 15-20 ms against 1 ms, measured for a 50,000-point run in a 1,000,000-point table).
    run = TrackingMetric.run_id + 0 if recent and after > 0 else TrackingMetric.run_id
    rows = session.execute(
        select(TrackingMetric.id, TrackingMetric.run_id, TrackingMetric.key, TrackingMetric.step)
        .add_columns(TrackingMetric.value, TrackingMetric.is_nan)
        .where(run.in_(list(runs)), TrackingMetric.id > after)
        .order_by(TrackingMetric.id)
        .limit(limit)
    )
    return [
        MetricPoint(point_id, runs[run_id] or 0, key, step, math.nan if is_nan else value)
        for point_id, run_id, key, step, value, is_nan in rows
    ]


def params(session: Session, job_id: int) -> dict[str, str]:
    rows = session.execute(
        select(TrackingParam.key, TrackingParam.value)
        .join(TrackingRun, TrackingRun.id == TrackingParam.run_id)
        .where(TrackingRun.job_id == job_id)
        .order_by(TrackingParam.key)
    )
    return {key: value for key, value in rows}


# job show (polled by clients) reads a job's latest metrics and its params in one statement, built
# once: building the two selects per request cost more CPU than running them (py-spy under the
# mixed load: 28 % of a job show, two statements through the ORM for what is mostly no row).
_METRIC, _PARAM = 0, 1
_JOB_VIEW = union_all(
    select(
        literal_column(str(_METRIC)).label("kind"),
        TrackingLatestMetric.key,
        TrackingLatestMetric.value.label("number"),
        null().cast(Text).label("text"),
        TrackingLatestMetric.is_nan,
    )
    .join(TrackingRun, TrackingRun.id == TrackingLatestMetric.run_id)
    .where(TrackingRun.job_id == bindparam("job")),
    select(
        literal_column(str(_PARAM)).label("kind"),
        TrackingParam.key,
        null().cast(Float).label("number"),
        TrackingParam.value.label("text"),
        null().cast(Boolean).label("is_nan"),
    )
    .join(TrackingRun, TrackingRun.id == TrackingParam.run_id)
    .where(TrackingRun.job_id == bindparam("job")),
)


def job_view(session: Session, job_id: int) -> dict[str, Any]:
    """What a job's view shows of its run: ``metrics`` (latest values; NaN and infinities as
    MLflow's JSON writes them) and ``params``, as ``latest_metrics`` and ``params`` read them."""
    metrics: dict[str, Any] = {}
    found: dict[str, str] = {}
    for kind, key, number, value, is_nan in session.connection().execute(_JOB_VIEW, {"job": job_id}):
        if kind == _METRIC:
            metrics[key] = rules.wire_value(math.nan if is_nan else number)
        else:
            found[key] = value
    return {"metrics": dict(sorted(metrics.items())), "params": dict(sorted(found.items()))}


# -- a job's environment --------------------------------------------------------------------------
_placing: dict[tuple[str, int], WorkspaceRef] = {}  # (store, workspace id) → its ARM reference


def job_environment(
    session: Session, workspace_id: int, job: str, spec: dict[str, Any], server_url: str
) -> dict[str, str]:
    """What every process of a job gets so that ``mlflow.start_run()`` and ``mlflow.autolog()``
    attach to the job's own run: the tracking URI, the experiment and the run id. The token is
    not here: it is signed in as the run spec leaves for its agent (``tracking_tokens.seal``).
    The workspace's path never changes: read once per process and store."""
    key = (str(session.get_bind().engine.url), workspace_id)
    ref = _placing.get(key)
    if ref is None:
        ws = session.get(Workspace, workspace_id)
        assert ws is not None
        ref = _placing[key] = workspaces.ref_of(session, ws)
    return {
        "MLFLOW_TRACKING_URI": tracking_uri(server_url, ref),
        "MLFLOW_EXPERIMENT_NAME": str(spec.get("experiment_name") or DEFAULT_EXPERIMENT),
        "MLFLOW_RUN_ID": job,
    }


# -- runs --------------------------------------------------------------------------------------------
@dataclass
class RunView:
    """A run as MLflow's API shows it: its row (None for a job whose run nothing wrote yet), its
    job (None for a run made through the API), and its experiment (None: Default, not made)."""

    run_uuid: str
    row: TrackingRun | None
    job: Job | None
    experiment: TrackingExperiment | None

    @property
    def experiment_id(self) -> str:
        if self.experiment is None:
            return DEFAULT_EXPERIMENT_ID
        return experiment_external_id(self.experiment)

    @property
    def status(self) -> str:
        if self.job is not None:
            return rules.run_status(self.job.status)
        assert self.row is not None
        return self.row.status

    @property
    def name(self) -> str:
        if self.row is not None:
            return self.row.name
        assert self.job is not None
        return str(self.job.spec.get("display_name") or self.job.name)

    @property
    def start_time(self) -> int | None:
        if self.job is not None:
            started = self.job.started_at or self.job.submitted_at
            return int(started * 1000)
        assert self.row is not None
        return self.row.start_time

    @property
    def end_time(self) -> int | None:
        if self.job is not None:
            return int(self.job.ended_at * 1000) if self.job.ended_at else None
        assert self.row is not None
        return self.row.end_time

    @property
    def user_id(self) -> str:
        return self.row.user_id if self.row is not None else (self.job.created_by if self.job else "")

    @property
    def lifecycle_stage(self) -> str:
        return self.row.lifecycle_stage if self.row is not None else ACTIVE


def _job_experiment_name(job: Job) -> str:
    return str(job.spec.get("experiment_name") or DEFAULT_EXPERIMENT)


def find_run(session: Session, ws: Workspace, run_uuid: str) -> RunView:
    """The run RUN_UUID of the workspace (a job's, even if nothing logged to it yet), or 404."""
    row = session.scalar(
        select(TrackingRun).where(TrackingRun.workspace_id == ws.id, TrackingRun.run_uuid == run_uuid)
    )
    if row is not None:
        job = session.get(Job, row.job_id) if row.job_id is not None else None
        return RunView(run_uuid, row, job, session.get(TrackingExperiment, row.experiment_id))
    job = session.scalar(select(Job).where(Job.workspace_id == ws.id, Job.name == run_uuid))
    if job is None:
        raise not_found(f"run '{run_uuid}' not found in this workspace")
    return RunView(run_uuid, None, job, find_by_name(session, ws, _job_experiment_name(job)))


def run_for_write(session: Session, ws: Workspace, run_uuid: str) -> RunView:
    """``find_run``, its row made if it is a job's run nothing wrote yet; 400 if it is deleted or
    (not a job's) already ended, as MLflow refuses writes to those."""
    view = find_run(session, ws, run_uuid)
    if view.row is None:
        assert view.job is not None
        experiment = view.experiment or experiment_named(session, ws, _job_experiment_name(view.job))
        view.row = TrackingRun(
            workspace_id=ws.id,
            experiment_id=experiment.id,
            run_uuid=run_uuid,
            job_id=view.job.id,
            name=view.name,
            user_id=view.job.created_by,
            status=view.status,
            start_time=view.start_time,
            end_time=None,
            lifecycle_stage=ACTIVE,
            inputs=[],
            outputs=[],
        )
        if not inserted(session, view.row):  # a concurrent first write made it
            return run_for_write(session, ws, run_uuid)
        view.experiment = experiment
    if view.row.lifecycle_stage != ACTIVE:
        raise invalid(f"run '{run_uuid}' is deleted; restore it before writing to it", "run_id")
    return view


def create_run(
    session: Session,
    ws: Workspace,
    experiment_id: str,
    user_id: str,
    start_time: int | None,
    run_name: str | None,
    tags: dict[str, str],
) -> RunView:
    experiment = experiment_for_write(session, ws, experiment_id)
    if experiment.lifecycle_stage != ACTIVE:
        raise invalid(f"experiment '{experiment.name}' is deleted; restore it to add runs", "experiment_id")
    for key, value in tags.items():
        rules.check_tag(key, value)
    run_uuid = uuid.uuid4().hex
    name = run_name or tags.get("mlflow.runName") or f"run-{run_uuid[:8]}"
    row = TrackingRun(
        workspace_id=ws.id,
        experiment_id=experiment.id,
        run_uuid=run_uuid,
        job_id=None,
        name=name,
        user_id=user_id,
        status="RUNNING",
        start_time=start_time if start_time is not None else now_ms(),
        end_time=None,
        lifecycle_stage=ACTIVE,
        inputs=[],
        outputs=[],
    )
    session.add(row)
    session.flush()
    _set_tags(session, row, {**tags, "mlflow.runName": name})
    return RunView(run_uuid, row, None, experiment)


def update_run(view: RunView, status: str | None, end_time: int | None, run_name: str | None) -> None:
    """A run's status, end and name. A job's run follows its job: its status and end are the
    job's, whatever the client says (MLflow's client ends the run it resumed as FINISHED)."""
    row = view.row
    assert row is not None
    if run_name:
        row.name = run_name
    if view.job is not None:
        return
    if status is not None:
        row.status = rules.check_status(status)
        if status in rules.TERMINAL_RUN_STATUSES and end_time is None:
            end_time = now_ms()
    if end_time is not None:
        row.end_time = end_time


def set_run_lifecycle(view: RunView, stage: str) -> None:
    assert view.row is not None
    view.row.lifecycle_stage = stage


@dataclass(frozen=True)
class MetricIn:
    key: str
    value: float
    timestamp: int
    step: int


def log(
    session: Session,
    view: RunView,
    metrics: Sequence[MetricIn] = (),
    params_in: Sequence[tuple[str, str]] = (),
    tags: Sequence[tuple[str, str]] = (),
) -> None:
    """Metrics (history and latest), params (once each: a different value is refused) and tags
    of one run, in the caller's transaction."""
    row = view.row
    assert row is not None
    for metric in metrics:
        rules.check_key(metric.key, "metric")
    checked = [rules.check_param(k, v) for k, v in params_in]
    _log_params(session, row, checked)
    _set_tags(session, row, dict(rules.check_tag(k, v) for k, v in tags))
    fresh = _new_values(session, row, metrics)
    if fresh:
        session.add_all(
            TrackingMetric(
                run_id=row.id,
                key=m.key,
                value=0.0 if math.isnan(m.value) else m.value,
                is_nan=math.isnan(m.value),
                timestamp=m.timestamp,
                step=m.step,
            )
            for m in fresh
        )
        _update_latest(session, row, fresh)
    session.flush()


def _identity(key: str, value: float, timestamp: int, step: int) -> tuple[str, int, int, float | None]:
    return (key, timestamp, step, None if math.isnan(value) else value)


def _new_values(session: Session, row: TrackingRun, metrics: Sequence[MetricIn]) -> list[MetricIn]:
    """METRICS less the values the run already holds (same key, step, timestamp and value): as in
    MLflow's stores, logging a value again is a no-op (``log_model`` re-logs the run's metrics to
    link them to the model)."""
    if not metrics:
        return []
    held = session.execute(
        select(
            TrackingMetric.key,
            TrackingMetric.value,
            TrackingMetric.is_nan,
            TrackingMetric.timestamp,
            TrackingMetric.step,
        ).where(
            TrackingMetric.run_id == row.id,
            TrackingMetric.key.in_({m.key for m in metrics}),
            TrackingMetric.timestamp.in_({m.timestamp for m in metrics}),
        )
    ).all()
    seen = {_identity(k, math.nan if nan else v, ts, step) for k, v, nan, ts, step in held}
    fresh: list[MetricIn] = []
    for m in metrics:
        identity = _identity(m.key, m.value, m.timestamp, m.step)
        if identity not in seen:
            seen.add(identity)
            fresh.append(m)
    return fresh


def _log_params(session: Session, row: TrackingRun, pairs: list[tuple[str, str]]) -> None:
    if not pairs:
        return
    wanted: dict[str, str] = {}
    for key, value in pairs:
        if wanted.get(key, value) != value:
            raise invalid(f"param '{key}' is given two values in one request; log it once", "params")
        wanted[key] = value
    existing = dict(
        session.execute(
            select(TrackingParam.key, TrackingParam.value).where(
                TrackingParam.run_id == row.id, TrackingParam.key.in_(list(wanted))
            )
        ).all()
    )
    for key, value in wanted.items():
        if key in existing:
            if existing[key] != value:
                raise invalid(
                    f"param '{key}' was already logged with value '{existing[key][:100]}' for run "
                    f"'{row.run_uuid}'; params cannot change (log a new key, or a metric)",
                    "params",
                )
            continue
        session.add(TrackingParam(run_id=row.id, key=key, value=value))


def _set_tags(session: Session, row: TrackingRun, tags: dict[str, str]) -> None:
    if not tags:
        return
    existing = {
        t.key: t
        for t in session.scalars(
            select(TrackingTag).where(TrackingTag.run_id == row.id, TrackingTag.key.in_(list(tags)))
        )
    }
    for key, value in tags.items():
        if key in existing:
            existing[key].value = value
        else:
            session.add(TrackingTag(run_id=row.id, key=key, value=value))
    if "mlflow.runName" in tags:
        row.name = tags["mlflow.runName"]


def delete_tag(session: Session, view: RunView, key: str) -> None:
    assert view.row is not None
    done = session.execute(
        delete(TrackingTag).where(and_(TrackingTag.run_id == view.row.id, TrackingTag.key == key))
    )
    if not getattr(done, "rowcount", 0):
        raise not_found(f"no tag '{key}' on run '{view.run_uuid}'")


def _update_latest(session: Session, row: TrackingRun, metrics: Iterable[MetricIn]) -> None:
    best: dict[str, MetricIn] = {}
    for m in metrics:
        held = best.get(m.key)
        if held is None or rules.latest_key(m.step, m.timestamp, m.value) > rules.latest_key(
            held.step, held.timestamp, held.value
        ):
            best[m.key] = m
    stored = {
        latest.key: latest
        for latest in session.scalars(
            select(TrackingLatestMetric).where(
                TrackingLatestMetric.run_id == row.id, TrackingLatestMetric.key.in_(list(best))
            )
        )
    }
    for key, m in best.items():
        nan = math.isnan(m.value)
        latest = stored.get(key)
        if latest is None:
            fresh = TrackingLatestMetric(
                run_id=row.id,
                key=key,
                value=0.0 if nan else m.value,
                is_nan=nan,
                timestamp=m.timestamp,
                step=m.step,
            )
            if inserted(session, fresh):
                continue
            latest = session.get(TrackingLatestMetric, (row.id, key), populate_existing=True)
            assert latest is not None
        held_value = math.nan if latest.is_nan else latest.value
        if rules.latest_key(m.step, m.timestamp, m.value) > rules.latest_key(
            latest.step, latest.timestamp, held_value
        ):
            latest.value, latest.is_nan = (0.0 if nan else m.value), nan
            latest.timestamp, latest.step = m.timestamp, m.step


def log_inputs(view: RunView, datasets: list[dict[str, Any]]) -> None:
    assert view.row is not None
    known = {
        (d.get("dataset", {}).get("name"), d.get("dataset", {}).get("digest")) for d in view.row.inputs or []
    }
    added = [
        d
        for d in datasets
        if (d.get("dataset", {}).get("name"), d.get("dataset", {}).get("digest")) not in known
    ]
    view.row.inputs = [*(view.row.inputs or []), *added]
