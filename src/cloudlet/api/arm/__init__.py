"""The Azure Resource Manager facade that the official ``azure-ai-ml`` SDK talks to
(``../shared/AZURE-ML-API.md``): thin routers that translate ARM's wire shapes to the same
``services/`` calls the native routers make, and back.

Shared by every ARM router (workspaces and computes here; codes, datastores, jobs, run history
are more routers of the same kind):

- ``WS``: the workspace path prefix, ``/subscriptions/{sub}/resourceGroups/{rg}/providers/
  Microsoft.MachineLearningServices/workspaces/{ws}``; ``LOCATION`` for per-location routes;
- errors: cloudlet's own errors already answer in ARM's shape (``{"error": {"code", "message",
  "target", "details"}}``, ``api/errors.py``); ``arm_errors`` renames native field targets to the
  ARM path the SDK wrote;
- ``lro_headers``: ``Azure-AsyncOperation`` (an absolute URL on the HTTPS listener), ``Location``
  and ``Retry-After: 1`` for an operation; its status route (``operations.py``) answers
  InProgress / Succeeded / Failed from cloudlet's own operations;
- ``page``: ``{"value": [...], "nextLink"}`` with ``$skipToken`` (and ``$top``);
- ``api-version`` is accepted and ignored everywhere (the SDK sends many).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar
from urllib.parse import urlencode

from fastapi import Depends, Request

from cloudlet.api.deps import AppState, Context
from cloudlet.domain.errors import CloudletError
from cloudlet.services.core.context import ARM_PROVIDER, WorkspaceRef

if TYPE_CHECKING:
    from cloudlet.store.schema import Operation


SUB = "/subscriptions/{sub}"
RG = SUB + "/resourceGroups/{rg}"
PROVIDER = "/providers/" + ARM_PROVIDER
WS = RG + PROVIDER + "/workspaces/{ws}"
LOCATION = SUB + PROVIDER + "/locations/{location}"
PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
T = TypeVar("T")


def ref(sub: str, rg: str, ws: str) -> WorkspaceRef:
    return WorkspaceRef(sub, rg, ws)


async def _path_workspace(sub: str, rg: str, ws: str) -> WorkspaceRef:
    return WorkspaceRef(sub, rg, ws)  # async: resolved on the event loop, no thread-pool hop


# A route's workspace, from its path (``{sub}``, ``{rg}``, ``{ws}``): one parameter, not three.
ArmWorkspace = Annotated[WorkspaceRef, Depends(_path_workspace)]


def https_base(request: Request, state: AppState) -> str:
    """Where absolute URLs point: the request's own base when it came over TLS (the name the client
    used, which the certificate carries), else the TLS listener's recorded URL."""
    if request.url.scheme == "https":
        return str(request.base_url).rstrip("/")
    return state.https.value or str(request.base_url).rstrip("/")


def operation_url(ctx: Context, location: str, op: Operation) -> str:
    base = https_base(ctx.request, ctx.state)
    sub = ctx.request.path_params.get("sub", "")
    return f"{base}/subscriptions/{sub}{PROVIDER}/locations/{location}/computeOperationsStatus/{op.id}"


def lro_headers(ctx: Context, location: str, op: Operation) -> dict[str, str]:
    """``Azure-AsyncOperation`` (the SDK polls it with its bearer token), ``Location`` (the same
    document: for a POST or DELETE the poller's final GET), and ``Retry-After`` (without it the
    SDK waits 30 s between polls)."""
    url = operation_url(ctx, location, op)
    return {"Azure-AsyncOperation": url, "Location": url, "Retry-After": "1"}


@contextmanager
def arm_errors(rename: Callable[[str | None], str | None]) -> Iterator[None]:
    """Re-raise cloudlet's errors with their field targets named as the ARM body names them (the
    message, which names the field and the fix, stays the native one)."""
    try:
        yield
    except CloudletError as exc:
        target = rename(exc.target)
        if target == exc.target:
            raise
        raise CloudletError(exc.code, exc.message, target, exc.status, exc.details) from None


def page(request: Request, items: Sequence[T], render: Callable[[T], Any]) -> dict[str, Any]:
    """One page of ITEMS (``$skipToken``: the offset; ``$top``: the page size, at most
    MAX_PAGE_SIZE) with a ``nextLink`` to the rest, as ARM list operations answer."""
    skip = _int_param(request, "$skipToken", 0, len(items))
    top = _int_param(request, "$top", PAGE_SIZE, MAX_PAGE_SIZE) or PAGE_SIZE
    chunk = items[skip : skip + top]
    body: dict[str, Any] = {"value": [render(item) for item in chunk]}
    if skip + top < len(items):
        params = {k: v for k, v in request.query_params.items() if k not in ("$skipToken", "$top")}
        params.update({"$skipToken": str(skip + top), "$top": str(top)})
        body["nextLink"] = f"{str(request.url).split('?', 1)[0]}?{urlencode(params)}"
    return body


def _int_param(request: Request, name: str, default: int, most: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or len(raw) > 9:
        raise CloudletError(
            "InvalidRequest", f"query parameter '{name}' must be a whole number (got {raw!r})", name
        )
    return min(int(raw), most)
