"""Tracking's experiments (MLflow's, per workspace): create, find, search, rename, delete, tags.
The experiment named ``Default`` is MLflow's id ``0`` (made on first use)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.tracking import tracking as rules
from cloudlet.domain.tracking.tracking import EXISTS, invalid, not_found
from cloudlet.store.schema import TrackingExperiment, Workspace

DEFAULT_EXPERIMENT = "Default"
DEFAULT_EXPERIMENT_ID = "0"  # what MLflow's client uses when no experiment is set
ACTIVE, DELETED = "active", "deleted"
VIEW_TYPES = {"ACTIVE_ONLY": (ACTIVE,), "DELETED_ONLY": (DELETED,), "ALL": (ACTIVE, DELETED)}


def now_ms() -> int:
    return int(time.time() * 1000)


def experiment_external_id(experiment: TrackingExperiment) -> str:
    return DEFAULT_EXPERIMENT_ID if experiment.name == DEFAULT_EXPERIMENT else str(experiment.id)


def find_by_name(session: Session, ws: Workspace, name: str) -> TrackingExperiment | None:
    return session.scalar(
        select(TrackingExperiment).where(
            TrackingExperiment.workspace_id == ws.id, TrackingExperiment.name == name
        )
    )


def inserted(session: Session, row: Any) -> bool:
    """ROW added in a savepoint; False (nothing written) when a concurrent transaction inserted
    the same key first (the ranks of a job logging their first values together, on PostgreSQL)."""
    try:
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        return False
    return True


def _new_experiment(
    session: Session, ws: Workspace, name: str, tags: dict[str, str]
) -> TrackingExperiment | None:
    stamp = now_ms()
    experiment = TrackingExperiment(
        workspace_id=ws.id, name=name, lifecycle_stage=ACTIVE, tags=tags, created_at=stamp, updated_at=stamp
    )
    return experiment if inserted(session, experiment) else None


def experiment_named(session: Session, ws: Workspace, name: str) -> TrackingExperiment:
    """The workspace's experiment NAME, made if missing (a job's experiment, ``Default``)."""
    found = find_by_name(session, ws, name) or _new_experiment(session, ws, name, {})
    if found is None:  # made by a concurrent request just now
        found = find_by_name(session, ws, name)
        assert found is not None
    return found


def create_experiment(session: Session, ws: Workspace, name: str, tags: dict[str, str]) -> str:
    """Make experiment NAME and commit; its MLflow id."""
    rules.check_experiment_name(name)
    for key, value in tags.items():
        rules.check_tag(key, value)
    existing = find_by_name(session, ws, name)
    made = _new_experiment(session, ws, name, tags) if existing is None else None
    if made is None:
        deleted = existing is not None and existing.lifecycle_stage == DELETED
        state = " (deleted: restore it, or pick another name)" if deleted else ""
        raise CloudletError(EXISTS, f"experiment '{name}' already exists{state}", "name", 400)
    session.commit()
    return experiment_external_id(made)


def get_experiment(session: Session, ws: Workspace, experiment_id: str) -> TrackingExperiment | None:
    """The experiment with this id; None for ``0`` (Default) not made yet; 404 otherwise."""
    if experiment_id == DEFAULT_EXPERIMENT_ID:
        return find_by_name(session, ws, DEFAULT_EXPERIMENT)
    experiment = None
    if experiment_id.isdigit() and len(experiment_id) < 12:
        experiment = session.get(TrackingExperiment, int(experiment_id))
    if experiment is None or experiment.workspace_id != ws.id:
        raise not_found(f"no experiment with id '{experiment_id}' in this workspace")
    return experiment


def experiment_for_write(session: Session, ws: Workspace, experiment_id: str) -> TrackingExperiment:
    experiment = get_experiment(session, ws, experiment_id)
    return experiment if experiment is not None else experiment_named(session, ws, DEFAULT_EXPERIMENT)


def experiment_by_name(session: Session, ws: Workspace, name: str) -> TrackingExperiment | None:
    experiment = find_by_name(session, ws, name)
    if experiment is None and name != DEFAULT_EXPERIMENT:
        raise not_found(f"no experiment named '{name}' in this workspace")
    return experiment


def search_experiments(
    session: Session,
    ws: Workspace,
    view_type: str,
    filter_text: str | None,
    order_by: list[str] | None,
    max_results: int | None,
    page_token: str | None,
) -> tuple[list[TrackingExperiment], str | None]:
    stages = view_stages(view_type)
    clauses = rules.parse_filter(filter_text, rules.EXPERIMENT_ATTRIBUTES)
    orders = rules.parse_order_by(order_by, rules.EXPERIMENT_ATTRIBUTES)
    limit = rules.check_max_results(max_results, rules.DEFAULT_EXPERIMENT_RESULTS)
    offset = rules.page_offset(page_token)
    rows = session.scalars(
        select(TrackingExperiment).where(
            TrackingExperiment.workspace_id == ws.id, TrackingExperiment.lifecycle_stage.in_(stages)
        )
    ).all()
    items = [
        rules.Searchable(
            {"name": e.name, "creation_time": e.created_at, "last_update_time": e.updated_at, "id": e.id},
            tags=e.tags or {},
        )
        for e in rows
    ]
    by_id = {e.id: e for e in rows}
    chosen = [i for i in items if rules.matches(i, clauses)]
    default = [rules.Order("attribute", "last_update_time", False), rules.Order("attribute", "id", True)]
    ordered = rules.sort(chosen, orders, default)
    page = [by_id[i.attributes["id"]] for i in ordered[offset : offset + limit]]
    return page, rules.page_token(offset + limit) if offset + limit < len(ordered) else None


def view_stages(view_type: str | None) -> tuple[str, ...]:
    stages = VIEW_TYPES.get(view_type or "ACTIVE_ONLY")
    if stages is None:
        raise invalid(f"view_type '{view_type}' is not one of {', '.join(VIEW_TYPES)}", "view_type")
    return stages


def rename_experiment(session: Session, ws: Workspace, experiment_id: str, new_name: str) -> None:
    """Rename the experiment and commit (Default cannot be renamed; names stay unique)."""
    experiment = experiment_for_write(session, ws, experiment_id)
    rules.check_experiment_name(new_name)
    if experiment.name == DEFAULT_EXPERIMENT:
        raise invalid("the Default experiment (id 0) cannot be renamed", "experiment_id")
    if new_name != experiment.name and find_by_name(session, ws, new_name) is not None:
        raise CloudletError(EXISTS, f"experiment '{new_name}' already exists", "new_name", 400)
    experiment.name, experiment.updated_at = new_name, now_ms()
    session.commit()


def set_lifecycle(session: Session, ws: Workspace, experiment_id: str, stage: str) -> None:
    """Delete (DELETED) or restore (ACTIVE) the experiment and commit."""
    experiment = experiment_for_write(session, ws, experiment_id)
    if experiment.name == DEFAULT_EXPERIMENT and stage == DELETED:
        raise invalid("the Default experiment (id 0) cannot be deleted", "experiment_id")
    experiment.lifecycle_stage, experiment.updated_at = stage, now_ms()
    session.commit()


def set_experiment_tag(session: Session, ws: Workspace, experiment_id: str, key: str, value: str) -> None:
    rules.check_tag(key, value)
    experiment = experiment_for_write(session, ws, experiment_id)
    experiment.tags = {**(experiment.tags or {}), key: value}
    experiment.updated_at = now_ms()
    session.commit()
