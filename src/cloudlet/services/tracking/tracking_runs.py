"""MLflow's run writes as use cases: each finds the run it writes (a job's run made on its first
write), changes it and commits (``services/tracking/tracking.py`` has the steps, which also run inside
other transactions). The router names the workspace the caller may write and renders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from cloudlet.services.tracking import tracking, tracking_reads
from cloudlet.services.tracking.tracking import MetricIn, RunView
from cloudlet.services.tracking.tracking_experiments import ACTIVE, DELETED
from cloudlet.services.tracking.tracking_reads import RunData
from cloudlet.store.schema import Workspace


def create_run(
    session: Session,
    ws: Workspace,
    experiment_id: str,
    user_id: str,
    start_time: int | None,
    run_name: str | None,
    tags: dict[str, str],
) -> tuple[RunView, RunData]:
    """A new run and its data (read before the commit), committed."""
    view = tracking.create_run(session, ws, experiment_id, user_id, start_time, run_name, tags)
    data = tracking_reads.run_data(session, [view])[view.run_uuid]
    session.commit()
    return view, data


def update_run(
    session: Session,
    ws: Workspace,
    run_id: str,
    status: str | None,
    end_time: int | None,
    run_name: str | None,
) -> RunView:
    view = tracking.run_for_write(session, ws, run_id)
    tracking.update_run(view, status, end_time, run_name)
    session.commit()
    return view


def delete_run(session: Session, ws: Workspace, run_id: str) -> None:
    """Mark the run deleted (a job's run nothing wrote yet gets its row first)."""
    view = tracking.find_run(session, ws, run_id)
    if view.row is None:
        view = tracking.run_for_write(session, ws, run_id)
    tracking.set_run_lifecycle(view, DELETED)
    session.commit()


def restore_run(session: Session, ws: Workspace, run_id: str) -> None:
    """Mark the run active again; a job's run without a row was never deleted (nothing to do)."""
    view = tracking.find_run(session, ws, run_id)
    if view.row is not None:
        tracking.set_run_lifecycle(view, ACTIVE)
        session.commit()


def log(
    session: Session,
    ws: Workspace,
    run_id: str,
    metrics: Sequence[MetricIn] = (),
    params_in: Sequence[tuple[str, str]] = (),
    tags: Sequence[tuple[str, str]] = (),
) -> None:
    """Log metrics, params and tags to the run and commit."""
    tracking.log(session, tracking.run_for_write(session, ws, run_id), metrics, params_in, tags)
    session.commit()


def delete_tag(session: Session, ws: Workspace, run_id: str, key: str) -> None:
    tracking.delete_tag(session, tracking.run_for_write(session, ws, run_id), key)
    session.commit()


def log_inputs(session: Session, ws: Workspace, run_id: str, datasets: list[dict[str, Any]]) -> None:
    tracking.log_inputs(tracking.run_for_write(session, ws, run_id), datasets)
    session.commit()
