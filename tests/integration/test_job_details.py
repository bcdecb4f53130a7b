"""A job's details in one statement (``services.views.job_details``), on SQLite and PostgreSQL:
what it reads is what the separate reads it replaced give (``jobs.runs_of``, the asset uses in id order,
``tracking.job_view``), for a job with nothing, and for one with runs over attempts and ranks, asset
uses, metrics (NaN, infinities) and params; another job's rows are not mixed in."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session

from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.core.clock import utcnow
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.tracking import tracking
from cloudlet.services.views import job_details
from cloudlet.store import db
from cloudlet.store.schema import (
    AssetUse,
    Job,
    JobRun,
    ResourceGroup,
    Subscription,
    TrackingExperiment,
    TrackingLatestMetric,
    TrackingParam,
    TrackingRun,
    Workspace,
)


def _uses_by_orm(session: Session, job_id: int) -> list[dict[str, Any]]:
    """The job view's asset uses as they were read before ``job_details`` (``assets.uses_view``, gone):
    the reference the union is checked against."""
    uses = session.scalars(select(AssetUse).where(AssetUse.job_id == job_id).order_by(AssetUse.id))
    return [
        {"field": u.field, "role": u.role, "kind": u.kind, "name": u.name, "version": u.version} for u in uses
    ]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgres" else db.sqlite_url(tmp_path)
    engine = create_engine(
        db.normalise_url(url), json_deserializer=db.load_json, json_serializer=db.dump_json
    )
    db.migrate(engine)
    yield engine
    engine.dispose()


def _job(session: Session, name: str) -> Job:
    job = Job(
        workspace_id=1,
        name=name,
        compute_name="cpu",
        spec={"type": "command", "command": "true"},
        status=JobStatus.COMPLETED.value,
        created_by="alice",
        submitted_at=1.0,
    )
    session.add(job)
    session.flush()
    return job


def _fill(session: Session, job: Job, experiment: int, tag: str) -> None:
    for attempt, rank in ((2, 1), (1, 1), (2, 0), (1, 0)):  # not inserted in order
        session.add(
            JobRun(
                id=f"{tag}-{attempt}-{rank}",
                job_id=job.id,
                attempt=attempt,
                rank=rank,
                node_id=f"{tag}-node-{rank}",
                state="ended",
                spec={},
                exit_code=None if (attempt, rank) == (2, 1) else attempt - 1,
                reason="preempted" if attempt == 1 else None,
                assigned_at=1.0,
                started_at=10.5 + attempt + rank,
                ended_at=None if attempt == 2 else 20.25 + rank,
            )
        )
    for role, field, kind, name, version in (
        ("output", "outputs.model", "model", f"{tag}-m", None),
        ("input", "inputs.data", "data", f"{tag}-ds", "3"),
        ("environment", "environment", "environment", f"{tag}-env", "1"),
    ):
        session.add(AssetUse(job_id=job.id, role=role, field=field, kind=kind, name=name, version=version))
    run = TrackingRun(
        workspace_id=1, experiment_id=experiment, run_uuid=job.name, job_id=job.id, name=job.name, user_id="u"
    )
    run.status = "FINISHED"
    session.add(run)
    session.flush()
    metrics = [("loss", 0.25, False), ("acc", 0.0, True), ("big", math.inf, False), ("neg", -math.inf, False)]
    for key, value, is_nan in [*metrics, (f"{tag}-only", 3.0, False)]:
        session.add(
            TrackingLatestMetric(run_id=run.id, key=key, value=value, is_nan=is_nan, step=1, timestamp=1)
        )
    for key, value in (("lr", "0.1"), ("a", tag), ("z", "")):
        session.add(TrackingParam(run_id=run.id, key=key, value=value))
    session.flush()


def _separately(session: Session, job: Job) -> dict[str, Any]:
    runs = job_service.runs_of(session, job)
    fields = ("attempt", "node_id", "exit_code", "reason", "started_at", "ended_at")
    return {
        "runs": [tuple(getattr(run, name) for name in fields) for run in runs],
        "assets": _uses_by_orm(session, job.id),
        **tracking.job_view(session, job.id),
    }


def _together(session: Session, job: Job) -> dict[str, Any]:
    details = job_details.of_job(session, job.id)
    return {
        "runs": [tuple(run) for run in details.runs],
        "assets": details.assets,
        "metrics": details.metrics,
        "params": details.params,
    }


def test_one_statement_reads_what_the_separate_reads_did(engine: Engine) -> None:
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        session.add(Subscription(id="s", display_name="s"))
        session.flush()
        session.add(ResourceGroup(id=1, subscription_id="s", name="rg", location="l"))
        session.flush()
        workspace = Workspace(id=1, resource_group_id=1, name="ws", location="l", created_on=utcnow())
        workspace.tags = {}
        session.add(workspace)
        session.flush()
        experiment = TrackingExperiment(workspace_id=1, name="e", tags={}, created_at=1, updated_at=1)
        session.add(experiment)
        bare, full, other = _job(session, "bare"), _job(session, "full"), _job(session, "other")
        _fill(session, full, experiment.id, "full")
        _fill(session, other, experiment.id, "other")
    with db.read_session_factory(engine)() as session:
        for job in (bare, full, other):
            job = session.get(Job, job.id)
            assert job is not None
            assert _together(session, job) == _separately(session, job)
        shown = _together(session, full)
        order = [(1, "full-node-0"), (1, "full-node-1"), (2, "full-node-0"), (2, "full-node-1")]
        assert [run[:2] for run in shown["runs"]] == order
        assert shown["metrics"] == {
            "acc": "NaN",
            "big": "Infinity",
            "full-only": 3.0,
            "loss": 0.25,
            "neg": "-Infinity",
        }
        assert [use["name"] for use in shown["assets"]] == ["full-m", "full-ds", "full-env"]
        assert _together(session, bare) == {"runs": [], "assets": [], "metrics": {}, "params": {}}
