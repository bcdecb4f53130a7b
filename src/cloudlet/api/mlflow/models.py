"""MLflow 3's logged models (``mlflow.<flavor>.log_model``, ``autolog``'s model logging) and a
run's outputs: create, get, finalize, tags, params, search, delete; ``runs/outputs``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Response
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.mlflow import (
    API,
    MlflowRoute,
    job_scope,
    may_read_run,
    readable_runs,
    run_writer,
    workspace,
)
from cloudlet.api.mlflow.experiments import KeyValue, Param
from cloudlet.domain.access.roles import Access
from cloudlet.domain.tracking.tracking import invalid
from cloudlet.services.tracking import tracking_models as models

if TYPE_CHECKING:
    from cloudlet.store.schema import TrackingLoggedModel


router = APIRouter(tags=["mlflow"], route_class=MlflowRoute)
ModelId = Annotated[str, PathParam(min_length=1, max_length=64)]
RunId = Annotated[str, Field(min_length=1, max_length=128)]
Pairs = Annotated[list[KeyValue], Field(max_length=100)]


class CreateModel(BaseModel):
    # source_run_id: required here (a model is logged inside a run), whatever MLflow's own says.
    model_config = ConfigDict(extra="ignore", json_schema_extra={"required": ["source_run_id"]})
    experiment_id: Annotated[str, Field(max_length=64)] = "0"
    name: Annotated[str, Field(max_length=256)] = ""
    model_type: Annotated[str, Field(max_length=256)] | None = None
    source_run_id: RunId = ""  # required (above); missing: a 400 naming it
    params: Annotated[list[Param], Field(max_length=100)] = []
    tags: Pairs = []


class Finalize(BaseModel):
    model_config = ConfigDict(extra="ignore")
    status: Annotated[str, Field(json_schema_extra={"enum": list(models.STATUSES)})]


class ModelTags(BaseModel):
    model_config = ConfigDict(extra="ignore")
    tags: Pairs = []


class ModelParams(BaseModel):
    model_config = ConfigDict(extra="ignore")
    params: Annotated[list[Param], Field(max_length=100)] = []


class SearchModels(BaseModel):
    model_config = ConfigDict(extra="ignore")
    experiment_ids: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=100)] = []
    filter: Annotated[str, Field(max_length=4000)] | None = None
    max_results: Annotated[int, Field(ge=1, le=50_000)] | None = None
    page_token: Annotated[str, Field(max_length=200)] | None = None


class ModelOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model_id: Annotated[str, Field(max_length=64)]
    step: int = 0


class LogOutputs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    run_id: RunId
    models: Annotated[list[ModelOutput], Field(max_length=100)] = []


def _view(ctx: Context, model: TrackingLoggedModel, run_uuid: str) -> dict[str, Any]:
    return models.shown(ctx.session, model, run_uuid)


def _writable(ctx: Context, sub: str, rg: str, ws: str, model_id: str) -> tuple[TrackingLoggedModel, str]:
    """A model to change: the caller may write its run (a Contributor, or that run's job's token)."""
    scope = job_scope(ctx)
    found = workspace(ctx, sub, rg, ws, Access.READ if scope is not None else Access.WRITE)
    model, run_uuid = models.find(ctx.session, found, model_id)
    if scope is not None:
        run_writer(ctx, sub, rg, ws, run_uuid)
    return model, run_uuid


@router.post(API + "/logged-models")
def create_model(sub: str, rg: str, ws: str, body: CreateModel, ctx: Context = Depends(context)) -> Response:
    if not body.source_run_id:
        raise invalid(
            "log a model inside a run here (source_run_id): its artifacts are the run's", "source_run_id"
        )
    found = run_writer(ctx, sub, rg, ws, body.source_run_id)
    answer = models.create(
        ctx.session,
        found,
        body.source_run_id,
        body.name,
        body.model_type,
        {p.key: p.value for p in body.params},
        {t.key: t.value for t in body.tags},
        ctx.caller.name,
    )
    return json_response({"model": answer})


@router.get(API + "/logged-models/{model_id}")
def get_model(sub: str, rg: str, ws: str, model_id: ModelId, ctx: Context = Depends(context)) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.READ)
    model, run_uuid = models.find(ctx.session, found, model_id)
    may_read_run(ctx, run_uuid)  # a job's token: its own runs' models only
    return json_response({"model": _view(ctx, model, run_uuid)})


@router.patch(API + "/logged-models/{model_id}")
def finalize_model(
    sub: str, rg: str, ws: str, model_id: ModelId, body: Finalize, ctx: Context = Depends(context)
) -> Response:
    model, run_uuid = _writable(ctx, sub, rg, ws, model_id)
    answer = models.finalize(ctx.session, model, run_uuid, body.status)
    return json_response({"model": answer})


@router.delete(API + "/logged-models/{model_id}")
def delete_model(sub: str, rg: str, ws: str, model_id: ModelId, ctx: Context = Depends(context)) -> Response:
    model, _ = _writable(ctx, sub, rg, ws, model_id)
    models.delete(ctx.session, model)
    return json_response({})


@router.patch(API + "/logged-models/{model_id}/tags")
def set_model_tags(
    sub: str, rg: str, ws: str, model_id: ModelId, body: ModelTags, ctx: Context = Depends(context)
) -> Response:
    model, run_uuid = _writable(ctx, sub, rg, ws, model_id)
    answer = models.set_tags(ctx.session, model, run_uuid, {t.key: t.value for t in body.tags})
    return json_response({"model": answer})


@router.delete(API + "/logged-models/{model_id}/tags/{tag_key}")
def delete_model_tag(
    sub: str,
    rg: str,
    ws: str,
    model_id: ModelId,
    tag_key: Annotated[str, PathParam(max_length=250)],
    ctx: Context = Depends(context),
) -> Response:
    model, _ = _writable(ctx, sub, rg, ws, model_id)
    models.delete_tag(ctx.session, model, tag_key)
    return json_response({})


@router.post(API + "/logged-models/{model_id}/params")
def log_model_params(
    sub: str, rg: str, ws: str, model_id: ModelId, body: ModelParams, ctx: Context = Depends(context)
) -> Response:
    model, _ = _writable(ctx, sub, rg, ws, model_id)
    models.log_params(ctx.session, model, {p.key: p.value for p in body.params})
    return json_response({})


@router.post(API + "/logged-models/search")
def search_models(
    sub: str, rg: str, ws: str, body: SearchModels, ctx: Context = Depends(context)
) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.READ)
    page, token = models.search(
        ctx.session, found, body.experiment_ids, body.filter, body.max_results, body.page_token
    )
    mine = readable_runs(ctx)
    answer: dict[str, Any] = {
        "models": [_view(ctx, m, run_uuid) for m, run_uuid in page if mine is None or run_uuid in mine]
    }
    if token:
        answer["next_page_token"] = token
    return json_response(answer)


@router.post(API + "/runs/outputs")
def log_outputs(sub: str, rg: str, ws: str, body: LogOutputs, ctx: Context = Depends(context)) -> Response:
    found = run_writer(ctx, sub, rg, ws, body.run_id)
    models.log_outputs(ctx.session, found, body.run_id, [o.model_dump() for o in body.models])
    return json_response({})
