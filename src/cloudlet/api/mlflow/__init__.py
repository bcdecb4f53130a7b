"""MLflow's REST tracking API, served from cloudlet's own store (services/tracking/tracking.py), under Azure
ML's paths so that both the plain MLflow client (an http/https tracking URI) and Azure ML's
plugin find it:

    /mlflow/v1.0/subscriptions/{sub}/resourceGroups/{rg}/providers/
        Microsoft.MachineLearningServices/workspaces/{ws}/api/2.0/mlflow/...        (tracking)
        .../api/2.0/mlflow-artifacts/artifacts/{run id}/{path}                       (artifacts)

The tracking URI of a workspace is the part before ``/api/2.0``. Errors answer in MLflow's shape,
``{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": ...}`` (its client reads the code: a
missing experiment by name is None, not an error).

Callers: an API key or access token, or a job's own token (``MLFLOW_TRACKING_TOKEN`` in every
job's environment, ``services/tracking/tracking_tokens.py``): until its job ends, it reads the workspace's
experiments and reads and writes its job's run and its child jobs' runs, nothing else. Roles as
everywhere: Reader reads, Contributor writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from cloudlet.api.arm import WS
from cloudlet.api.deps import AppState, Context
from cloudlet.api.routing import _CloudletRoute, authenticate_user, bearer_token
from cloudlet.domain.access.roles import Access, Role
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.tracking.tracking import invalid
from cloudlet.services.access import audit, workspaces
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.tracking import tracking_tokens
from cloudlet.services.tracking.tracking_tokens import JOB_TOKEN_PREFIX, JobScope

if TYPE_CHECKING:
    from cloudlet.store.schema import Workspace


BASE = "/mlflow/v1.0" + WS
API = BASE + "/api/2.0/mlflow"
ARTIFACTS = BASE + "/api/2.0/mlflow-artifacts/artifacts"
JOB_STATE_KEY = "tracking_job"

_CODES = {
    400: "INVALID_PARAMETER_VALUE",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "RESOURCE_DOES_NOT_EXIST",
    409: "RESOURCE_ALREADY_EXISTS",
    413: "INVALID_PARAMETER_VALUE",
    503: "TEMPORARILY_UNAVAILABLE",
}
_DESCRIPTIONS = {
    400: "Invalid input (INVALID_PARAMETER_VALUE, RESOURCE_ALREADY_EXISTS); the message names the field",
    401: "No credential, or an unknown or expired one (UNAUTHENTICATED)",
    403: "Authenticated, but not allowed (PERMISSION_DENIED)",
    404: "Not found, or not visible to this caller (RESOURCE_DOES_NOT_EXIST)",
    503: "The server is busy; retry after `Retry-After` seconds",
}


class MlflowError(BaseModel):
    """MLflow's error body."""

    error_code: str
    message: str


def _scope_in_thread(state: AppState, token: str) -> JobScope:
    with state.read_sessions() as session:
        return tracking_tokens.scope(session, state.token_secret, token)


async def _job_caller(request: Request, token: str) -> Caller:
    """A job's token: as its job stands now (ended: 401), for the job's runs alone."""
    state: AppState = request.app.state.cloudlet
    scope = tracking_tokens.cached_scope(token)
    if scope is None:
        tracking_tokens.claims_of(state.token_secret, token)  # a forged token costs no store trip
        scope = await run_in_threadpool(_scope_in_thread, state, token)
    setattr(request.state, JOB_STATE_KEY, scope)
    return Caller(
        principal_id=0, name=f"job '{scope.job}'", is_admin=False, roles={scope.workspace_id: Role.READER}
    )


def error_response(exc: CloudletError) -> Response:
    code = exc.code if exc.code.isupper() else _CODES.get(exc.status, "INTERNAL_ERROR")
    headers = {"Retry-After": "1"} if exc.status == 503 else None
    body = json.dumps({"error_code": code, "message": exc.message}).encode()
    return Response(body, status_code=exc.status, headers=headers, media_type="application/json")


def _validation_message(exc: RequestValidationError) -> str:
    first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
    if first.get("type") == "json_invalid":
        return "the request body is not valid JSON"
    where = [str(p) for p in first.get("loc", ()) if p not in ("body", "query")]
    field = ".".join(where) or "body"
    if first.get("type") == "missing":
        return f"missing value for required parameter '{field}'; see MLflow's REST API for the fields"
    return f"invalid value for parameter '{field}': {first.get('msg', 'not valid')}"


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class MlflowRoute(_CloudletRoute):
    """A user's credential or a job's tracking token, authenticated before the body is read;
    every error in MLflow's shape."""

    READ_ERRORS = (400, 401, 403, 404, 503)
    WRITE_ERRORS = (400, 401, 403, 404, 503)

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        codes = self.WRITE_ERRORS if set(kwargs.get("methods") or ()) - {"GET", "HEAD"} else self.READ_ERRORS
        mine = {code: {"model": MlflowError, "description": _DESCRIPTIONS[code]} for code in codes}
        kwargs["responses"] = {**mine, **(kwargs.get("responses") or {})}
        super().__init__(path, endpoint, **kwargs)

    async def authenticate(self, request: Request) -> None:
        token = bearer_token(request, "an API key, access token or a job's MLFLOW_TRACKING_TOKEN")
        if token.startswith(JOB_TOKEN_PREFIX):
            request.state.caller = await _job_caller(request, token)
            request.state.token = token
        else:
            await authenticate_user(request)
        audit.bind_request_id(audit.request_id_from(request.headers))
        audit.bind_channel(audit.MLFLOW)

    def get_route_handler(self) -> Handler:
        inner = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await inner(request)
            except CloudletError as exc:
                return error_response(exc)
            except RequestValidationError as exc:
                return error_response(invalid(_validation_message(exc)))
            except HTTPException as exc:
                if exc.status_code != 400:  # 405, 413: the app's handlers answer them
                    raise
                # A body FastAPI could not parse: in MLflow's shape too, as the document says.
                return error_response(invalid(f"the request body is not valid JSON: {exc.detail}"))

        return handler


def job_scope(ctx: Context) -> JobScope | None:
    """The scope of the job token calling (None for a user)."""
    scope: JobScope | None = getattr(ctx.request.state, JOB_STATE_KEY, None)
    return scope


def workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> Workspace:
    """The workspace, for a read (Reader) or a write (Contributor). A job's token reads
    experiments and its own runs (``run_reader``, ``readable_runs``); what it may write is its
    own runs (``run_writer``), nothing else."""
    scope = job_scope(ctx)
    if scope is not None and needed != Access.READ:
        raise CloudletError(
            "PERMISSION_DENIED",
            f"a job's tracking token writes only its own run ('{scope.job}'); use an API key for this",
            status=403,
        )
    return workspaces.resolve(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, needed)


def _own_run(scope: JobScope, run_id: str, what: str) -> None:
    if run_id not in scope.runs:
        raise CloudletError(
            "PERMISSION_DENIED",
            f"a job's tracking token {what} only its own run ('{scope.job}') and its child jobs' runs, "
            f"not run '{run_id[:128]}'; use an API key for this",
            status=403,
        )


def may_read_run(ctx: Context, run_id: str) -> None:
    """403 for a job's token reading a run not its job's (after the workspace was resolved)."""
    scope = job_scope(ctx)
    if scope is not None:
        _own_run(scope, run_id, "reads")


def run_reader(ctx: Context, sub: str, rg: str, ws: str, run_id: str) -> Workspace:
    """The workspace, for a read of run RUN_ID: a Reader's, or the token of that run's job."""
    found = workspace(ctx, sub, rg, ws, Access.READ)
    may_read_run(ctx, run_id)
    return found


def readable_runs(ctx: Context) -> frozenset[str] | None:
    """The runs a search may show this caller: a job token's own; None for a user (their role's)."""
    scope = job_scope(ctx)
    return scope.runs if scope is not None else None


def run_writer(ctx: Context, sub: str, rg: str, ws: str, run_id: str) -> Workspace:
    """The workspace, for a write to run RUN_ID: a Contributor's, or the token of that run's job."""
    scope = job_scope(ctx)
    if scope is None:
        return workspace(ctx, sub, rg, ws, Access.WRITE)
    _own_run(scope, run_id, "writes")
    return workspaces.resolve(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, Access.READ)
