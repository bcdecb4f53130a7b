"""MLflow experiments: create, get, get-by-name, search, update (rename), delete, restore, tags."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.mlflow import API, MlflowRoute, workspace
from cloudlet.domain.access.roles import Access
from cloudlet.domain.tracking.tracking import (
    KEY_PATTERN,
    MAX_EXPERIMENT_NAME_CHARS,
    MAX_KEY_CHARS,
    MAX_PARAM_VALUE_CHARS,
    MAX_TAG_VALUE_CHARS,
    NAME_PATTERN,
)
from cloudlet.services.tracking import tracking_experiments as experiments

if TYPE_CHECKING:
    from cloudlet.store.schema import TrackingExperiment


router = APIRouter(tags=["mlflow"], route_class=MlflowRoute)
Id = Annotated[str, Field(min_length=1, max_length=64)]
Text = Annotated[str, Field(max_length=8000)]


# Documented as the domain checks them (tracking.check_key, check_experiment_name).
Key = Annotated[str, Field(max_length=MAX_KEY_CHARS, json_schema_extra={"pattern": KEY_PATTERN})]
ExperimentName = Annotated[
    str, Field(max_length=MAX_EXPERIMENT_NAME_CHARS, json_schema_extra={"pattern": NAME_PATTERN})
]

VIEW_TYPES = ["ACTIVE_ONLY", "DELETED_ONLY", "ALL"]
ViewType = Annotated[str, Field(max_length=16, json_schema_extra={"enum": VIEW_TYPES})]


class KeyValue(BaseModel):
    """A tag."""

    model_config = ConfigDict(extra="ignore")
    key: Key
    value: Annotated[str, Field(max_length=MAX_TAG_VALUE_CHARS)] = ""


class Param(KeyValue):
    value: Annotated[str, Field(max_length=MAX_PARAM_VALUE_CHARS)] = ""


class CreateExperiment(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: ExperimentName
    artifact_location: Text | None = None
    tags: Annotated[list[KeyValue], Field(max_length=100)] = []


class ExperimentRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    experiment_id: Id


class UpdateExperiment(ExperimentRef):
    new_name: ExperimentName


class ExperimentTag(ExperimentRef):
    key: Key
    value: Text = ""


class SearchExperiments(BaseModel):
    model_config = ConfigDict(extra="ignore")
    max_results: Annotated[int, Field(ge=1, le=50_000)] | None = None
    page_token: Annotated[str, Field(max_length=200)] | None = None
    filter: Annotated[str, Field(max_length=4000)] | None = None
    order_by: Annotated[list[Annotated[str, Field(max_length=300)]], Field(max_length=20)] = []
    view_type: ViewType | None = None


def view(experiment: TrackingExperiment | None) -> dict[str, Any]:
    """MLflow's Experiment (None: the Default experiment, id 0, before anything made it)."""
    if experiment is None:
        return {
            "experiment_id": experiments.DEFAULT_EXPERIMENT_ID,
            "name": experiments.DEFAULT_EXPERIMENT,
            "artifact_location": "mlflow-artifacts:/",
            "lifecycle_stage": experiments.ACTIVE,
            "tags": [],
        }
    return {
        "experiment_id": experiments.experiment_external_id(experiment),
        "name": experiment.name,
        "artifact_location": "mlflow-artifacts:/",
        "lifecycle_stage": experiment.lifecycle_stage,
        "last_update_time": experiment.updated_at,
        "creation_time": experiment.created_at,
        "tags": [{"key": k, "value": v} for k, v in sorted((experiment.tags or {}).items())],
    }


@router.post(API + "/experiments/create")
def create_experiment(
    sub: str, rg: str, ws: str, body: CreateExperiment, ctx: Context = Depends(context)
) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.WRITE)
    made = experiments.create_experiment(ctx.session, found, body.name, {t.key: t.value for t in body.tags})
    return json_response({"experiment_id": made})


@router.get(API + "/experiments/get")
def get_experiment(
    sub: str,
    rg: str,
    ws: str,
    experiment_id: Annotated[str, Query(max_length=64)],
    ctx: Context = Depends(context),
) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.READ)
    return json_response({"experiment": view(experiments.get_experiment(ctx.session, found, experiment_id))})


@router.get(API + "/experiments/get-by-name")
def get_experiment_by_name(
    sub: str,
    rg: str,
    ws: str,
    experiment_name: Annotated[str, Query(max_length=256)],
    ctx: Context = Depends(context),
) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.READ)
    return json_response(
        {"experiment": view(experiments.experiment_by_name(ctx.session, found, experiment_name))}
    )


def _search(ctx: Context, sub: str, rg: str, ws: str, body: SearchExperiments) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.READ)
    page, token = experiments.search_experiments(
        ctx.session,
        found,
        body.view_type or "ACTIVE_ONLY",
        body.filter,
        body.order_by,
        body.max_results,
        body.page_token,
    )
    answer: dict[str, Any] = {"experiments": [view(e) for e in page]}
    if token:
        answer["next_page_token"] = token
    return json_response(answer)


@router.post(API + "/experiments/search")
def search_experiments(
    sub: str, rg: str, ws: str, body: SearchExperiments, ctx: Context = Depends(context)
) -> Response:
    return _search(ctx, sub, rg, ws, body)


@router.get(API + "/experiments/search")
def search_experiments_get(
    sub: str,
    rg: str,
    ws: str,
    ctx: Context = Depends(context),
    max_results: Annotated[int | None, Query(ge=1, le=50_000)] = None,
    page_token: Annotated[str | None, Query(max_length=200)] = None,
    filter: Annotated[str | None, Query(max_length=4000)] = None,
    view_type: Annotated[str | None, Query(max_length=16, json_schema_extra={"enum": VIEW_TYPES})] = None,
) -> Response:
    body = SearchExperiments(
        max_results=max_results, page_token=page_token, filter=filter, view_type=view_type
    )
    return _search(ctx, sub, rg, ws, body)


@router.post(API + "/experiments/update")
def update_experiment(
    sub: str, rg: str, ws: str, body: UpdateExperiment, ctx: Context = Depends(context)
) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.WRITE)
    experiments.rename_experiment(ctx.session, found, body.experiment_id, body.new_name)
    return json_response({})


@router.post(API + "/experiments/delete")
def delete_experiment(
    sub: str, rg: str, ws: str, body: ExperimentRef, ctx: Context = Depends(context)
) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.WRITE)
    experiments.set_lifecycle(ctx.session, found, body.experiment_id, experiments.DELETED)
    return json_response({})


@router.post(API + "/experiments/restore")
def restore_experiment(
    sub: str, rg: str, ws: str, body: ExperimentRef, ctx: Context = Depends(context)
) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.WRITE)
    experiments.set_lifecycle(ctx.session, found, body.experiment_id, experiments.ACTIVE)
    return json_response({})


@router.post(API + "/experiments/set-experiment-tag")
def set_experiment_tag(
    sub: str, rg: str, ws: str, body: ExperimentTag, ctx: Context = Depends(context)
) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.WRITE)
    experiments.set_experiment_tag(ctx.session, found, body.experiment_id, body.key, body.value)
    return json_response({})
