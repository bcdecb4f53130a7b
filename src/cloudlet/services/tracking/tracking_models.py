"""MLflow 3's logged models (what ``mlflow.<flavor>.log_model`` and ``autolog`` make): a model of
a run, its params and tags, and its status (pending until its artifacts are uploaded, then
ready). Its artifacts are its run's, under ``models/<model id>/`` (api/mlflow/artifacts.py), so a
job's token that may write its run may write its models."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.tracking import tracking as rules
from cloudlet.domain.tracking.tracking import invalid, not_found
from cloudlet.services.tracking.tracking import RunView, run_for_write
from cloudlet.services.tracking.tracking_experiments import (
    ACTIVE,
    DELETED,
    experiment_external_id,
    get_experiment,
    now_ms,
)
from cloudlet.store.schema import TrackingExperiment, TrackingLoggedModel, TrackingRun, Workspace

STATUSES = ("LOGGED_MODEL_PENDING", "LOGGED_MODEL_READY", "LOGGED_MODEL_UPLOAD_FAILED")
ATTRIBUTES = {
    "name": "name",
    "model_id": "model_id",
    "status": "status",
    "source_run_id": "source_run_id",
    "model_type": "model_type",
    "creation_time": "creation_time",
    "creation_timestamp": "creation_time",
    "last_updated_timestamp": "last_update_time",
}


def artifact_path(run_uuid: str, model_id: str) -> str:
    return f"{run_uuid}/models/{model_id}"


def create(
    session: Session,
    ws: Workspace,
    run_id: str,
    name: str,
    model_type: str | None,
    params: dict[str, str],
    tags: dict[str, str],
    creator: str,
) -> dict[str, Any]:
    """Log a model of run RUN_ID (pending until finalized) and commit; its view."""
    run = run_for_write(session, ws, run_id)
    assert run.row is not None
    for key, value in [*params.items(), *tags.items()]:
        rules.check_tag(key, value)
    stamp = now_ms()
    model = TrackingLoggedModel(
        workspace_id=ws.id,
        model_id=f"m-{uuid.uuid4().hex}",
        experiment_id=run.row.experiment_id,
        run_id=run.row.id,
        name=name or "model",
        model_type=model_type,
        status="LOGGED_MODEL_PENDING",
        status_message=None,
        creator=creator,
        tags=tags,
        params=params,
        lifecycle_stage=ACTIVE,
        created_at=stamp,
        updated_at=stamp,
    )
    session.add(model)
    session.flush()
    return _committed(session, model, run.run_uuid)


def _committed(session: Session, model: TrackingLoggedModel, run_uuid: str) -> dict[str, Any]:
    """MODEL's view, built before the commit (its experiment is a query), then the commit."""
    answer = shown(session, model, run_uuid)
    session.commit()
    return answer


def find(session: Session, ws: Workspace, model_id: str) -> tuple[TrackingLoggedModel, str]:
    """The workspace's logged model MODEL_ID and its run's id, or 404."""
    row = session.execute(
        select(TrackingLoggedModel, TrackingRun.run_uuid)
        .join(TrackingRun, TrackingRun.id == TrackingLoggedModel.run_id)
        .where(TrackingLoggedModel.workspace_id == ws.id, TrackingLoggedModel.model_id == model_id)
    ).first()
    if row is None or row[0].lifecycle_stage == DELETED:
        raise not_found(f"logged model '{model_id}' not found in this workspace")
    return row[0], row[1]


def finalize(session: Session, model: TrackingLoggedModel, run_uuid: str, status: str) -> dict[str, Any]:
    """Set the model's status and commit; its view."""
    if status not in STATUSES:
        raise invalid(f"status '{status}' is not one of {', '.join(STATUSES)}", "status")
    model.status, model.updated_at = status, now_ms()
    return _committed(session, model, run_uuid)


def delete(session: Session, model: TrackingLoggedModel) -> None:
    model.lifecycle_stage = DELETED
    session.commit()


def set_tags(
    session: Session, model: TrackingLoggedModel, run_uuid: str, tags: dict[str, str]
) -> dict[str, Any]:
    """Merge TAGS into the model's and commit; its view."""
    for key, value in tags.items():
        rules.check_tag(key, value)
    model.tags = {**(model.tags or {}), **tags}
    model.updated_at = now_ms()
    return _committed(session, model, run_uuid)


def delete_tag(session: Session, model: TrackingLoggedModel, key: str) -> None:
    if key not in (model.tags or {}):
        raise not_found(f"no tag '{key}' on logged model '{model.model_id}'")
    model.tags = {k: v for k, v in model.tags.items() if k != key}
    model.updated_at = now_ms()
    session.commit()


def log_params(session: Session, model: TrackingLoggedModel, params: dict[str, str]) -> None:
    for key, value in params.items():
        rules.check_param(key, value)
    model.params = {**(model.params or {}), **params}
    model.updated_at = now_ms()
    session.commit()


def search(
    session: Session,
    ws: Workspace,
    experiment_ids: list[str],
    filter_text: str | None,
    max_results: int | None,
    page_token: str | None,
) -> tuple[list[tuple[TrackingLoggedModel, str]], str | None]:
    """Models of the experiments matching MLflow's filter (``name = 'model'`` is what the client
    asks when it resolves ``runs:/<run>/<name>``), newest first, one page."""
    clauses = rules.parse_filter(filter_text, ATTRIBUTES)
    limit = rules.check_max_results(max_results, 100)
    offset = rules.page_offset(page_token)
    experiments = [e.id for e in (get_experiment(session, ws, x) for x in experiment_ids) if e is not None]
    rows = session.execute(
        select(TrackingLoggedModel, TrackingRun.run_uuid)
        .join(TrackingRun, TrackingRun.id == TrackingLoggedModel.run_id)
        .where(
            TrackingLoggedModel.workspace_id == ws.id,
            TrackingLoggedModel.experiment_id.in_(experiments),
            TrackingLoggedModel.lifecycle_stage == ACTIVE,
        )
        .order_by(TrackingLoggedModel.created_at.desc(), TrackingLoggedModel.id.desc())
    ).all()
    chosen: list[tuple[TrackingLoggedModel, str]] = []
    for model, run_uuid in rows:
        attributes: dict[str, Any] = {
            "name": model.name,
            "model_id": model.model_id,
            "status": model.status,
            "source_run_id": run_uuid,
            "model_type": model.model_type,
            "creation_time": model.created_at,
            "last_update_time": model.updated_at,
        }
        if rules.matches(
            rules.Searchable(attributes, tags=model.tags or {}, params=model.params or {}), clauses
        ):
            chosen.append((model, run_uuid))
    more = offset + limit < len(chosen)
    return chosen[offset : offset + limit], rules.page_token(offset + limit) if more else None


def log_outputs(session: Session, ws: Workspace, run_id: str, models: list[dict[str, Any]]) -> None:
    """Record MODELS (each the workspace's, or 404) as run RUN_ID's outputs and commit."""
    run: RunView = run_for_write(session, ws, run_id)
    assert run.row is not None
    for output in models:
        find(session, ws, str(output.get("model_id")))
    known = {m.get("model_id") for m in run.row.outputs or []}
    added = [m for m in models if m.get("model_id") not in known]
    run.row.outputs = [*(run.row.outputs or []), *added]
    session.commit()


def shown(session: Session, model: TrackingLoggedModel, run_uuid: str) -> dict[str, Any]:
    """The model's view, with its experiment's external id."""
    experiment = session.get(TrackingExperiment, model.experiment_id)
    assert experiment is not None
    return view(model, run_uuid, experiment_external_id(experiment))


def view(model: TrackingLoggedModel, run_uuid: str, experiment_external_id: str) -> dict[str, Any]:
    return {
        "info": {
            "model_id": model.model_id,
            "experiment_id": experiment_external_id,
            "name": model.name,
            "creation_timestamp_ms": model.created_at,
            "last_updated_timestamp_ms": model.updated_at,
            "artifact_uri": f"mlflow-artifacts:/{artifact_path(run_uuid, model.model_id)}",
            "status": model.status,
            "model_type": model.model_type or "",
            "source_run_id": run_uuid,
            "status_message": model.status_message or "",
            "tags": [{"key": k, "value": v} for k, v in sorted((model.tags or {}).items())],
        },
        "data": {"params": [{"key": k, "value": v} for k, v in sorted((model.params or {}).items())]},
    }
