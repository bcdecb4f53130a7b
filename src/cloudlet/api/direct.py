"""A route's handler without FastAPI's generic dependency solver, for the endpoints that need none
of what it solves.

Measured in-process on compute show (``docs/performance.md``, "Mixed load"): of the event loop's
CPU per request, FastAPI's ``solve_dependencies`` took about a third (it re-inspects every
parameter's annotation on each request and validates even a plain ``str`` path parameter through
pydantic), and AnyIO's hop to a worker thread cost ~130 µs of CPU with 50 requests in flight
against ~25 µs for ``loop.run_in_executor``. Most endpoints here take nothing but path and query
parameters and ``Depends(context)`` (or ``app_state``), both plain coroutines of the request, and
return a ``Response``; for them this module builds, once per route, a plan of exactly which
values to take from where:

- a path parameter annotated plain ``str`` with no constraint is taken as the router matched it
  (pydantic would return the same string);
- any other path parameter, and every query parameter the request sends, is validated by
  FastAPI's own ``request_params_to_args``, so defaults, aliases and constraints are as FastAPI has
  them; a query parameter it does not send takes its default as FastAPI would give it (a copy,
  not validated) without the ~7 µs a field FastAPI's extraction costs (a job list's 15 filters:
  ~110 µs of CPU a request for the one or two a client sends);
- the known dependencies are awaited directly; a sync endpoint runs on ``RequestThreads``.

Anything else (a body, a header or cookie parameter, another dependency, FastAPI's telemetry
switched on) keeps FastAPI's handler, and so does any request whose parameters do not validate:
FastAPI then answers with the very error it always did, before any dependency has run.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import inspect
import typing
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies import utils as fastapi_utils
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import request_params_to_args
from fastapi.telemetry import get_telemetry_data

from cloudlet.api.deps import app_state, context

Handler = Callable[[Request], Coroutine[Any, Any, Response]]

# Plain coroutines of the request alone: awaited as they are.
REQUEST_DEPENDENCIES: frozenset[Callable[..., Any]] = frozenset({context, app_state})


class RequestThreads:
    """The threads the direct handlers run sync endpoints on: as many as AnyIO's limiter allows
    for FastAPI's own handlers (``StoreLimits.api_threads``), made on first use."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self._executor: ThreadPoolExecutor | None = None

    def configure(self, size: int) -> None:
        if self._executor is not None and size != self.size:
            self._executor.shutdown(wait=False)
            self._executor = None
        self.size = size

    def executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="cloudlet-request")
        return self._executor

    async def run(self, function: Callable[..., Any], values: dict[str, Any]) -> Any:
        # The endpoint sees the request's context variables (the audit's request id), as it
        # does under AnyIO, which copies them too.
        call = functools.partial(contextvars.copy_context().run, function, **values)
        return await asyncio.get_running_loop().run_in_executor(self.executor(), call)


THREADS = RequestThreads()


@dataclass(frozen=True)
class DirectPlan:
    call: Callable[..., Any]
    is_coroutine: bool
    plain_path: tuple[tuple[str, str], ...]  # (argument, path parameter) taken as matched
    checked_path: Sequence[Any]  # FastAPI's ModelFields, validated by FastAPI
    query: Sequence[Any]
    # Per query field: the request keys it is read from and its default when none is sent
    # (``SEND_ANYWAY``: a field FastAPI must always see).
    query_absent: tuple[tuple[Any, tuple[str, ...], Any], ...]
    dependencies: tuple[tuple[str, Callable[..., Any]], ...]
    request_param: str | None


def _plain_str(field: Any) -> bool:
    info = field.field_info
    return info.annotation is str and not info.metadata and field.alias == field.name


SEND_ANYWAY = object()  # a query field validated by FastAPI whether or not the request sends it
_IMMUTABLE = (type(None), bool, int, float, str, bytes)


@dataclass(frozen=True)
class _CopyOf:
    """A mutable default: each request gets its own copy, as FastAPI gives it."""

    value: Any


def _absent_query(field: Any) -> tuple[Any, tuple[str, ...], Any]:
    """FIELD's request keys and what FastAPI makes of its absence: ``deepcopy(field.default)``,
    unvalidated, for a field that is not required, has no factory and does not validate its
    default (a copy is taken per request unless the default is immutable); else SEND_ANYWAY."""
    aliases = getattr(fastapi_utils, "_get_param_aliases", None)
    param_model = getattr(fastapi_utils, "_get_param_model", None)
    info = field.field_info
    if aliases is None or param_model is None or param_model(field) is not None:
        return field, (), SEND_ANYWAY  # FastAPI's extraction of it is not the one read here
    if info.is_required() or info.validate_default or info.default_factory is not None:
        return field, (), SEND_ANYWAY
    keys = tuple(key for _, key in aliases(field))
    default = info.default
    return field, keys, default if isinstance(default, _IMMUTABLE) else _CopyOf(default)


def _query_values(direct: DirectPlan, received: Mapping[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    """The endpoint's query values: FastAPI's for the fields the request sends, the defaults of
    the others."""
    values: dict[str, Any] = {}
    sent: list[Any] = []
    for field, keys, default in direct.query_absent:
        if default is SEND_ANYWAY or any(key in received for key in keys):
            sent.append(field)
        elif isinstance(default, _CopyOf):
            values[field.name] = copy.deepcopy(default.value)
        else:
            values[field.name] = default
    checked, errors = request_params_to_args(sent, received)
    values.update(checked)
    return values, errors


def _returns_response(call: Callable[..., Any]) -> bool:
    try:
        returned = typing.get_type_hints(call).get("return")
    except (NameError, TypeError):
        return False
    return isinstance(returned, type) and issubclass(returned, Response)


def _request_dependency(dep: Dependant) -> bool:
    return (
        dep.call in REQUEST_DEPENDENCIES
        and dep.name is not None
        and dep.request_param_name is not None
        and not (dep.path_params or dep.query_params or dep.header_params or dep.cookie_params)
        and not (dep.body_params or dep.dependencies)
    )


def plan(dependant: Dependant) -> DirectPlan | None:
    """How to call DEPENDANT's endpoint directly, or None when FastAPI's handler is needed."""
    call = dependant.call
    if call is None or not _returns_response(call):
        return None
    if dependant.header_params or dependant.cookie_params or dependant.body_params:
        return None
    special = (
        dependant.websocket_param_name,
        dependant.http_connection_param_name,
        dependant.response_param_name,
        dependant.background_tasks_param_name,
        dependant.security_scopes_param_name,
    )
    if any(name is not None for name in special):
        return None
    if not all(_request_dependency(dep) for dep in dependant.dependencies):
        return None
    plain = tuple((f.name, f.alias) for f in dependant.path_params if _plain_str(f))
    return DirectPlan(
        call=call,
        is_coroutine=inspect.iscoroutinefunction(call),
        plain_path=plain,
        checked_path=[f for f in dependant.path_params if not _plain_str(f)],
        query=list(dependant.query_params),
        query_absent=tuple(_absent_query(field) for field in dependant.query_params),
        dependencies=tuple((dep.name, dep.call) for dep in dependant.dependencies if dep.name and dep.call),
        request_param=dependant.request_param_name,
    )


def handler(direct: DirectPlan, fallback: Handler) -> Handler:
    """The route's handler: DIRECT's plan, or FALLBACK (FastAPI's) where the plan cannot answer."""

    async def handle(request: Request) -> Response:
        if get_telemetry_data() is not None:  # FastAPI's spans around dependencies and endpoint
            return await fallback(request)
        matched = request.path_params
        values: dict[str, Any] = {name: matched[alias] for name, alias in direct.plain_path}
        if direct.checked_path:
            checked, errors = request_params_to_args(direct.checked_path, matched)
            if errors:
                return await fallback(request)  # FastAPI's own 4xx for them
            values.update(checked)
        if direct.query:  # the query string is parsed only for a route that reads it
            checked, errors = _query_values(direct, request.query_params)
            if errors:
                return await fallback(request)
            values.update(checked)
        for name, dependency in direct.dependencies:
            values[name] = await dependency(request)
        if direct.request_param is not None:
            values[direct.request_param] = request
        if direct.is_coroutine:
            answer = await direct.call(**values)
        else:
            answer = await THREADS.run(direct.call, values)
        if not isinstance(answer, Response):
            raise TypeError(f"{direct.call.__name__} returned {type(answer).__name__}, not a Response")
        return answer

    return handle
