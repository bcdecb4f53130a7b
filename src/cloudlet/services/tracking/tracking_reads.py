"""Reading tracking runs: what a run logged (latest metrics, params, tags), a metric's history,
and MLflow's run search (filter, order, pages) over the named experiments."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.tracking import tracking as rules
from cloudlet.services.tracking.tracking import RunView
from cloudlet.services.tracking.tracking_experiments import get_experiment, view_stages
from cloudlet.store.schema import (
    Job,
    TrackingLatestMetric,
    TrackingMetric,
    TrackingParam,
    TrackingRun,
    TrackingTag,
    Workspace,
)


@dataclass
class RunData:
    metrics: list[TrackingLatestMetric]
    params: dict[str, str]
    tags: dict[str, str]


def run_data(session: Session, views: Sequence[RunView]) -> dict[str, RunData]:
    """Latest metrics, params and tags of each run (by run id), in three queries."""
    found = {v.run_uuid: RunData([], {}, {}) for v in views}
    by_row = {v.row.id: v.run_uuid for v in views if v.row is not None}
    for v in views:
        data = found[v.run_uuid]
        if v.job is not None:
            data.tags.update({str(k): str(val) for k, val in (v.job.spec.get("tags") or {}).items()})
        data.tags["mlflow.runName"] = v.name
        data.tags.setdefault("mlflow.user", v.user_id)
    if not by_row:
        return found
    ids = list(by_row)
    for metric in session.scalars(
        select(TrackingLatestMetric)
        .where(TrackingLatestMetric.run_id.in_(ids))
        .order_by(TrackingLatestMetric.key)
    ):
        found[by_row[metric.run_id]].metrics.append(metric)
    for run_id, key, value in session.execute(
        select(TrackingParam.run_id, TrackingParam.key, TrackingParam.value).where(
            TrackingParam.run_id.in_(ids)
        )
    ):
        found[by_row[run_id]].params[key] = value
    for run_id, key, value in session.execute(
        select(TrackingTag.run_id, TrackingTag.key, TrackingTag.value).where(TrackingTag.run_id.in_(ids))
    ):
        found[by_row[run_id]].tags[key] = value
    return found


def history(
    session: Session, view: RunView, key: str, max_results: int | None, page_token: str | None
) -> tuple[list[TrackingMetric], str | None]:
    if view.row is None:
        return [], None
    limit = rules.check_max_results(max_results, rules.MAX_RESULTS)
    offset = rules.page_offset(page_token)
    rows = list(
        session.scalars(
            select(TrackingMetric)
            .where(TrackingMetric.run_id == view.row.id, TrackingMetric.key == key)
            .order_by(TrackingMetric.step, TrackingMetric.timestamp, TrackingMetric.id)
            .offset(offset)
            .limit(limit + 1)
        )
    )
    more = len(rows) > limit
    return rows[:limit], rules.page_token(offset + limit) if more else None


def search_runs(
    session: Session,
    ws: Workspace,
    experiment_ids: list[str],
    filter_text: str | None,
    view_type: str | None,
    max_results: int | None,
    order_by: list[str] | None,
    page_token: str | None,
) -> tuple[list[RunView], dict[str, RunData], str | None]:
    """Runs of the experiments that match the filter, ordered, one page. Filter and order are
    evaluated here, on the runs of the named experiments (a job's run appears once something
    has written to it)."""
    stages = view_stages(view_type)
    clauses = rules.parse_filter(filter_text)
    orders = rules.parse_order_by(order_by)
    limit = rules.check_max_results(max_results, rules.DEFAULT_RUN_RESULTS)
    offset = rules.page_offset(page_token)
    experiments = [e for e in (get_experiment(session, ws, x) for x in experiment_ids) if e is not None]
    if not experiments:
        return [], {}, None
    by_id = {e.id: e for e in experiments}
    rows = session.execute(
        select(TrackingRun, Job)
        .outerjoin(Job, Job.id == TrackingRun.job_id)
        .where(TrackingRun.experiment_id.in_(list(by_id)), TrackingRun.lifecycle_stage.in_(stages))
    ).all()
    views = [RunView(row.run_uuid, row, job, by_id[row.experiment_id]) for row, job in rows]
    data = run_data(session, views)
    items: list[rules.Searchable] = []
    for v in views:
        d = data[v.run_uuid]
        metrics = {m.key: (math.nan if m.is_nan else m.value) for m in d.metrics}
        attributes = {
            "run_id": v.run_uuid,
            "run_name": v.name,
            "status": v.status,
            "user_id": v.user_id,
            "start_time": v.start_time,
            "end_time": v.end_time,
            "lifecycle_stage": v.lifecycle_stage,
            "view": v,
        }
        items.append(rules.Searchable(attributes, metrics, d.params, d.tags))
    chosen = [i for i in items if rules.matches(i, clauses)]
    default = [rules.Order("attribute", "start_time", False), rules.Order("attribute", "run_id", True)]
    ordered = rules.sort(chosen, orders, default)
    page = [i.attributes["view"] for i in ordered[offset : offset + limit]]
    more = offset + limit < len(ordered)
    return (
        page,
        {v.run_uuid: data[v.run_uuid] for v in page},
        rules.page_token(offset + limit) if more else None,
    )


PEERS = 50  # runs offered to compare with a job's: the newest of its experiment


def experiment_peers(session: Session, job: Job, limit: int = PEERS) -> list[Job]:
    """The other jobs whose runs are in the experiment of JOB's run, newest first (the runs a
    chart compares with the job's); none before JOB's run was written."""
    experiment = select(TrackingRun.experiment_id).where(TrackingRun.job_id == job.id).scalar_subquery()
    return list(
        session.scalars(
            select(Job)
            .join(TrackingRun, TrackingRun.job_id == Job.id)
            .where(
                TrackingRun.experiment_id == experiment,
                Job.workspace_id == job.workspace_id,
                Job.id != job.id,
            )
            .order_by(Job.submitted_at.desc(), Job.id.desc())
            .limit(limit)
        )
    )
