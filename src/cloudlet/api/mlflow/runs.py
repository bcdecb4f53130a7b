"""MLflow runs: create, get, update, delete, restore, search; log-metric, log-parameter, log-batch,
log-inputs, set-tag, delete-tag; a metric's history. A job's run is named by the job's name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, model_validator

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.mlflow import API, MlflowRoute, readable_runs, run_reader, run_writer, workspace
from cloudlet.api.mlflow.experiments import Key, KeyValue, Param, ViewType
from cloudlet.domain.access.roles import Access
from cloudlet.domain.tracking import tracking as rules
from cloudlet.domain.validation import WHOLE_FLOAT
from cloudlet.services.tracking import tracking, tracking_reads, tracking_runs
from cloudlet.services.tracking.tracking import MetricIn, RunView
from cloudlet.services.tracking.tracking_experiments import DEFAULT_EXPERIMENT_ID
from cloudlet.services.tracking.tracking_reads import RunData

if TYPE_CHECKING:
    pass


router = APIRouter(tags=["mlflow"], route_class=MlflowRoute)
RunId = Annotated[str, Field(min_length=1, max_length=128)]
# Strict: false is not 0 (JSON Schema's integer excludes booleans); 5.0 is 5, as JSON Schema says.
Millis = Annotated[StrictInt, Field(ge=0, le=2**63 - 1), WHOLE_FLOAT]
Step = Annotated[StrictInt, Field(ge=-(2**63), le=2**63 - 1), WHOLE_FLOAT]
# Strict numbers: a string is not coerced to a float past the string branch's pattern and length.
MetricValue = (
    StrictFloat
    | StrictInt
    | Annotated[str, Field(max_length=40, json_schema_extra={"pattern": rules.METRIC_STRING_PATTERN})]
)
ARTIFACT_ROOT = "mlflow-artifacts:/"


class RunRef(BaseModel):
    """``run_id`` (MLflow ≥ 1) or the older ``run_uuid``: either names the run."""

    model_config = ConfigDict(
        extra="ignore",
        # The validator below, as the document says it: one of the two, as a string.
        json_schema_extra={
            "anyOf": [
                {"required": [key], "properties": {key: {"type": "string"}}} for key in ("run_id", "run_uuid")
            ]
        },
    )
    run_id: RunId | None = None
    run_uuid: RunId | None = None

    @model_validator(mode="after")
    def _named(self) -> RunRef:
        if not (self.run_id or self.run_uuid):
            raise ValueError("name the run with run_id")
        return self

    @property
    def run(self) -> str:
        return str(self.run_id or self.run_uuid)


class Metric(BaseModel):
    model_config = ConfigDict(extra="ignore")
    key: Key
    value: MetricValue
    timestamp: Millis
    step: Step = 0

    def to_in(self) -> MetricIn:
        return MetricIn(self.key, rules.metric_value(self.value), self.timestamp, self.step)


class LogMetric(RunRef, Metric):
    pass


class LogParam(RunRef):
    key: Key
    value: Annotated[str, Field(max_length=6000)] = ""


class SetTag(RunRef):
    key: Key
    value: Annotated[str, Field(max_length=8000)] = ""


class DeleteTag(RunRef):
    key: Key


class LogBatch(RunRef):
    metrics: Annotated[list[Metric], Field(max_length=1000)] = []
    params: Annotated[list[Param], Field(max_length=100)] = []
    tags: Annotated[list[KeyValue], Field(max_length=100)] = []


class LogInputs(RunRef):
    datasets: Annotated[list[dict[str, Any]], Field(max_length=100)] = []


class CreateRun(BaseModel):
    model_config = ConfigDict(extra="ignore")
    experiment_id: Annotated[str, Field(max_length=64)] = DEFAULT_EXPERIMENT_ID
    user_id: Annotated[str, Field(max_length=256)] = ""
    run_name: Annotated[str, Field(max_length=256)] | None = None
    start_time: Millis | None = None
    tags: Annotated[list[KeyValue], Field(max_length=100)] = []


class UpdateRun(RunRef):
    status: (
        Annotated[str, Field(max_length=16, json_schema_extra={"enum": list(rules.RUN_STATUSES)})] | None
    ) = None
    end_time: Millis | None = None
    run_name: Annotated[str, Field(max_length=256)] | None = None


class SearchRuns(BaseModel):
    model_config = ConfigDict(extra="ignore")
    experiment_ids: Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=100)] = []
    filter: Annotated[str, Field(max_length=4000)] | None = None
    run_view_type: ViewType | None = None
    max_results: Annotated[int, Field(ge=1, le=50_000)] | None = None
    order_by: Annotated[list[Annotated[str, Field(max_length=300)]], Field(max_length=20)] = []
    page_token: Annotated[str, Field(max_length=200)] | None = None


# -- views ---------------------------------------------------------------------------------
def artifact_uri(run_uuid: str) -> str:
    """Where a run's artifacts are (``mlflow-artifacts:``, resolved by the client against the
    tracking URI: api/mlflow/artifacts.py)."""
    return f"{ARTIFACT_ROOT}{run_uuid}"


def info_view(v: RunView) -> dict[str, Any]:
    info: dict[str, Any] = {
        "run_id": v.run_uuid,
        "run_uuid": v.run_uuid,
        "run_name": v.name,
        "experiment_id": v.experiment_id,
        "user_id": v.user_id,
        "status": v.status,
        "artifact_uri": artifact_uri(v.run_uuid),
        "lifecycle_stage": v.lifecycle_stage,
    }
    if v.start_time is not None:
        info["start_time"] = v.start_time
    if v.end_time is not None:
        info["end_time"] = v.end_time
    return info


def run_view(v: RunView, data: RunData) -> dict[str, Any]:
    return {
        "info": info_view(v),
        "data": {
            "metrics": [
                {
                    "key": m.key,
                    "value": rules.wire_value(m.value, m.is_nan),
                    "timestamp": m.timestamp,
                    "step": m.step,
                }
                for m in data.metrics
            ],
            "params": [{"key": k, "value": val} for k, val in sorted(data.params.items())],
            "tags": [{"key": k, "value": val} for k, val in sorted(data.tags.items())],
        },
        "inputs": {"dataset_inputs": list(v.row.inputs or []) if v.row is not None else []},
        "outputs": {"model_outputs": list(v.row.outputs or []) if v.row is not None else []},
    }


def _named(run_id: str | None, run_uuid: str | None) -> str:
    if not (run_id or run_uuid):
        raise rules.invalid("name the run with the query parameter run_id", "run_id")
    return str(run_id or run_uuid)


def _one(ctx: Context, v: RunView) -> dict[str, Any]:
    return run_view(v, tracking_reads.run_data(ctx.session, [v])[v.run_uuid])


# -- routes --------------------------------------------------------------------------------
@router.post(API + "/runs/create")
def create_run(sub: str, rg: str, ws: str, body: CreateRun, ctx: Context = Depends(context)) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.WRITE)
    tags = {t.key: t.value for t in body.tags}
    user = body.user_id or tags.get("mlflow.user") or ctx.caller.name
    v, data = tracking_runs.create_run(
        ctx.session, found, body.experiment_id, user, body.start_time, body.run_name, tags
    )
    return json_response({"run": run_view(v, data)})


@router.get(API + "/runs/get")
def get_run(
    sub: str,
    rg: str,
    ws: str,
    ctx: Context = Depends(context),
    run_id: Annotated[str | None, Query(max_length=128)] = None,
    run_uuid: Annotated[str | None, Query(max_length=128)] = None,
) -> Response:
    run = _named(run_id, run_uuid)
    found = run_reader(ctx, sub, rg, ws, run)
    return json_response({"run": _one(ctx, tracking.find_run(ctx.session, found, run))})


@router.post(API + "/runs/update")
def update_run(sub: str, rg: str, ws: str, body: UpdateRun, ctx: Context = Depends(context)) -> Response:
    found = run_writer(ctx, sub, rg, ws, body.run)
    v = tracking_runs.update_run(ctx.session, found, body.run, body.status, body.end_time, body.run_name)
    return json_response({"run_info": info_view(v)})


@router.post(API + "/runs/delete")
def delete_run(sub: str, rg: str, ws: str, body: RunRef, ctx: Context = Depends(context)) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.WRITE)
    tracking_runs.delete_run(ctx.session, found, body.run)
    return json_response({})


@router.post(API + "/runs/restore")
def restore_run(sub: str, rg: str, ws: str, body: RunRef, ctx: Context = Depends(context)) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.WRITE)
    tracking_runs.restore_run(ctx.session, found, body.run)
    return json_response({})


@router.post(API + "/runs/search")
def search_runs(sub: str, rg: str, ws: str, body: SearchRuns, ctx: Context = Depends(context)) -> Response:
    found = workspace(ctx, sub, rg, ws, Access.READ)
    page, data, token = tracking_reads.search_runs(
        ctx.session,
        found,
        body.experiment_ids,
        body.filter,
        body.run_view_type,
        body.max_results,
        body.order_by,
        body.page_token,
    )
    mine = readable_runs(ctx)  # a job's token sees its own runs in a search, no others
    answer: dict[str, Any] = {
        "runs": [run_view(v, data[v.run_uuid]) for v in page if mine is None or v.run_uuid in mine]
    }
    if token:
        answer["next_page_token"] = token
    return json_response(answer)


@router.post(API + "/runs/log-metric")
def log_metric(sub: str, rg: str, ws: str, body: LogMetric, ctx: Context = Depends(context)) -> Response:
    metric = body.to_in()
    found = run_writer(ctx, sub, rg, ws, body.run)
    tracking_runs.log(ctx.session, found, body.run, [metric])
    return json_response({})


@router.post(API + "/runs/log-parameter")
def log_param(sub: str, rg: str, ws: str, body: LogParam, ctx: Context = Depends(context)) -> Response:
    found = run_writer(ctx, sub, rg, ws, body.run)
    tracking_runs.log(ctx.session, found, body.run, params_in=[(body.key, body.value)])
    return json_response({})


@router.post(API + "/runs/set-tag")
def set_tag(sub: str, rg: str, ws: str, body: SetTag, ctx: Context = Depends(context)) -> Response:
    found = run_writer(ctx, sub, rg, ws, body.run)
    tracking_runs.log(ctx.session, found, body.run, tags=[(body.key, body.value)])
    return json_response({})


@router.post(API + "/runs/delete-tag")
def delete_tag(sub: str, rg: str, ws: str, body: DeleteTag, ctx: Context = Depends(context)) -> Response:
    found = run_writer(ctx, sub, rg, ws, body.run)
    tracking_runs.delete_tag(ctx.session, found, body.run, body.key)
    return json_response({})


@router.post(API + "/runs/log-batch")
def log_batch(sub: str, rg: str, ws: str, body: LogBatch, ctx: Context = Depends(context)) -> Response:
    rules.check_batch(len(body.metrics), len(body.params), len(body.tags))
    metrics = [m.to_in() for m in body.metrics]
    found = run_writer(ctx, sub, rg, ws, body.run)
    tracking_runs.log(
        ctx.session,
        found,
        body.run,
        metrics,
        [(p.key, p.value) for p in body.params],
        [(t.key, t.value) for t in body.tags],
    )
    return json_response({})


@router.post(API + "/runs/log-inputs")
def log_inputs(sub: str, rg: str, ws: str, body: LogInputs, ctx: Context = Depends(context)) -> Response:
    found = run_writer(ctx, sub, rg, ws, body.run)
    tracking_runs.log_inputs(ctx.session, found, body.run, body.datasets)
    return json_response({})


@router.get(API + "/metrics/get-history")
def metric_history(
    sub: str,
    rg: str,
    ws: str,
    metric_key: Annotated[str, Query(max_length=250)],
    ctx: Context = Depends(context),
    run_id: Annotated[str | None, Query(max_length=128)] = None,
    run_uuid: Annotated[str | None, Query(max_length=128)] = None,
    max_results: Annotated[int | None, Query(ge=1, le=50_000)] = None,
    page_token: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    run = _named(run_id, run_uuid)
    v = tracking.find_run(ctx.session, run_reader(ctx, sub, rg, ws, run), run)
    rows, token = tracking_reads.history(ctx.session, v, metric_key, max_results, page_token)
    answer: dict[str, Any] = {
        "metrics": [
            {
                "key": m.key,
                "value": rules.wire_value(m.value, m.is_nan),
                "timestamp": m.timestamp,
                "step": m.step,
            }
            for m in rows
        ]
    }
    if token:
        answer["next_page_token"] = token
    return json_response(answer)
