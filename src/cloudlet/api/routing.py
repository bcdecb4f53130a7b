"""How every route is served: strict JSON, the caller authenticated before the body is read, and
one hop to the thread pool per request.

Each router names its kind of caller with its route class:
- ``UserRoute``: an API key or access token (``Authorization: Bearer clk_…|clt_…``);
- ``NodeRoute``: a node agent's token (``docs/agent-protocol.md``);
- ``PublicRoute``: nobody (health, the sign-in form).

The caller is established *before* FastAPI reads and validates the body, so an anonymous or
wrong credential gets 401 whatever it sent, and nothing of an unauthenticated body is buffered
or parsed. A credential seen in the last few seconds is answered from a per-process cache on the
event loop; otherwise the lookup runs in the thread pool (no store call ever runs on the loop).

Plain ``def`` endpoints run in the thread pool; their request's store session is closed in that
same thread when they return (``Context.close``), so the loop never waits on a ROLLBACK.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import threading
import time
import typing
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from fastapi.utils import create_model_field
from starlette.routing import compile_path, get_name

from cloudlet.api import direct, openapi
from cloudlet.api.deps import Context, end_context
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import audit, identity
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.context import Caller

if TYPE_CHECKING:
    from fastapi._compat import ModelField

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


# -- strict JSON --------------------------------------------------------------------------------
def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number; send a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large to be a number here; send a finite number")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > 40:  # far beyond any count, size or time this API takes
        raise ValueError("an integer of more than 40 digits; send a smaller number")
    return int(text)


def parse_json(raw: bytes | str) -> Any:
    """JSON as RFC 8259 has it: ``NaN``, ``Infinity`` and numbers that overflow to infinity
    (``1e999``) are refused, as is an integer of absurd length."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    try:
        return json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int
        )
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        raise json.JSONDecodeError(str(exc), text, 0) from None
    except RecursionError:  # ~1000 nested arrays or objects: no document of this API is that deep
        raise json.JSONDecodeError("the document is nested too deeply", text, 0) from None


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


# -- who is calling ---------------------------------------------------------------------------
def bearer_token(request: Request, what: str = "an API key or access token") -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise CloudletError(
            "AuthenticationFailed",
            f"missing 'Authorization: Bearer <token>' header with {what}; "
            "the admin key is in $CLOUDLET_HOME/credentials",
            status=401,
        )
    return token.strip()


def _caller_in_thread(request: Request, token: str) -> Caller:
    state = request.app.state.cloudlet
    with state.read_sessions() as session:
        return identity.authenticate(session, token, state.token_secret, state.https.audiences)


async def authenticate_user(request: Request) -> Caller:
    token = bearer_token(request)
    caller = identity.cached_caller(token)
    if caller is None:
        caller = await run_in_threadpool(_caller_in_thread, request, token)
    request.state.caller = caller
    request.state.token = token
    return caller


@dataclass(frozen=True)
class NodeCaller:
    """A node agent, known by its token (the node's own state is checked where it matters)."""

    node_id: str
    workspace_id: int
    token: str


NODE_CACHE_TTL_S = 30.0  # a node's token never changes; its state is checked by each route
_nodes: dict[str, tuple[float, NodeCaller]] = {}


def _node_in_thread(request: Request, token: str, token_hash: str) -> NodeCaller:
    state = request.app.state.cloudlet
    with state.read_sessions() as session:
        found = node_service.by_token_hash(session, token_hash)
    if found is None:
        raise CloudletError("AuthenticationFailed", "unknown node token", status=401)
    return NodeCaller(found[0], found[1], token)


async def authenticate_node(request: Request) -> NodeCaller:
    token = bearer_token(request, "the node's token ($CLOUDLET_NODE_TOKEN)")
    token_hash, now = node_service.hash_token(token), time.monotonic()
    hit = _nodes.get(token_hash)
    if hit is not None and hit[0] > now:
        node = hit[1]
    else:
        node = await run_in_threadpool(_node_in_thread, request, token, token_hash)
        if len(_nodes) > 100_000:
            _nodes.clear()
        _nodes[token_hash] = (now + NODE_CACHE_TTL_S, node)
    named = request.scope.get("path_params", {}).get("node_id")
    if named is not None and named != node.node_id:
        raise CloudletError("AuthenticationFailed", "unknown node or wrong node token", status=401)
    request.state.node = node
    return node


# -- the route classes --------------------------------------------------------------------------
def _closing_sessions(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """A sync endpoint whose ``Context`` arguments are closed in the endpoint's own thread."""

    @functools.wraps(endpoint)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return endpoint(*args, **kwargs)
        finally:
            for value in kwargs.values():
                if isinstance(value, Context):
                    value.close()

    return run


@functools.cache
def _response_field(model: type[Any]) -> ModelField:
    """The serialization field of a documented response's MODEL, as FastAPI makes one per route."""
    return create_model_field(name=f"Response_{model.__name__}", type_=model, mode="serialization")


_COMPILED = frozenset({"path_regex", "path_format", "param_convertors"})  # starlette's compile_path
# One lock for every route's deferred build: a build runs once per route, and FastAPI's code that
# makes a route is not known to be safe to run twice at once over one object.
_BUILD_LOCK = threading.RLock()


class _CloudletRoute(APIRoute):
    """A route whose FastAPI state is built on first use, not at import.

    FastAPI makes each route's dependency tree and a pydantic adapter for every parameter, body
    and documented response when the route is made: for the ~400 routes here that was ~1.1 s of
    the ~3 s ``import cloudlet.server`` took (docs/performance.md, "Start-up"), paid by every
    server, worker and test server, most of which serve a few dozen routes. What matching reads
    (the path's regular expression and parameters, the methods, the name, the endpoint) is set at
    once; the rest (``dependant``, ``body_field``, ``response_field``, ``app``, …) is FastAPI's
    own ``APIRoute.__init__``, run with the same arguments the first time any of it is read: a
    request the route serves, the OpenAPI document, a test reading ``dependant``. A route whose
    definition is wrong now fails there, not at import; ``tests/unit/test_startup.py``
    builds every route of the app."""

    READ_ERRORS: tuple[int, ...] = ()
    WRITE_ERRORS: tuple[int, ...] = ()

    async def authenticate(self, request: Request) -> None:
        raise NotImplementedError

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        sync = not inspect.iscoroutinefunction(endpoint)
        if sync:
            endpoint = _closing_sessions(endpoint)
        writes = set(kwargs.get("methods") or ()) - {"GET", "HEAD"}
        defaults = openapi.errors(*(self.WRITE_ERRORS if writes else self.READ_ERRORS))
        kwargs["responses"] = {**defaults, **(kwargs.get("responses") or {})}
        self._deferred: tuple[str, Callable[..., Any], dict[str, Any], bool] | None = (
            path,
            endpoint,
            kwargs,
            sync,
        )
        self._building: int | None = None
        # What Starlette's matching, the 405 walk and ``url_path_for`` read, as FastAPI sets it
        # (the path's regular expression too, when first read: ``_COMPILED``).
        self.path, self.endpoint = path, endpoint
        self.name = get_name(endpoint) if kwargs.get("name") is None else kwargs["name"]
        self.methods = {method.upper() for method in kwargs.get("methods") or ["GET"]}
        self.include_in_schema = kwargs.get("include_in_schema", True)

    def __getattr__(self, name: str) -> Any:
        """Called only for an attribute not set: compile the path, or build the route; then read it."""
        state = self.__dict__
        if name.startswith("__") or state.get("_deferred") is None:
            raise AttributeError(name)
        if state["_building"] == threading.get_ident():
            raise AttributeError(name)  # FastAPI's own __init__ asking what it has not set yet
        if name in _COMPILED:
            # A request's candidates are matched by their regular expression; a 404 or 405 walks
            # every route's: neither needs the route built.
            self.path_regex, self.path_format, self.param_convertors = compile_path(self.path)
        else:
            self.build()
        return object.__getattribute__(self, name)

    def build(self) -> None:
        """FastAPI's ``APIRoute.__init__`` with the route's arguments (once; idempotent)."""
        with _BUILD_LOCK:
            deferred = self._deferred
            if deferred is None:
                return
            path, endpoint, kwargs, sync = deferred
            # The building thread's id: its own reads of what is not set yet are AttributeErrors;
            # another thread's read waits on the lock for the build to end.
            self._building = threading.get_ident()
            try:
                if sync:
                    # FastAPI reads the signature through ``__wrapped__``; resolve its annotations
                    # here, where the endpoint's module globals are known.
                    wrapped = endpoint.__wrapped__  # type: ignore[attr-defined]
                    hints = typing.get_type_hints(wrapped, include_extras=True)
                    wrapped.__annotations__ = endpoint.__annotations__ = hints
                # The documented responses' models (every route's error body) get one adapter
                # each, shared by every route (only the OpenAPI document reads them): FastAPI
                # made one per route and code, ~40 % of what building a route cost.
                responses = kwargs["responses"]
                bare = {code: {k: v for k, v in r.items() if k != "model"} for code, r in responses.items()}
                super().__init__(path, endpoint, **{**kwargs, "responses": bare})
                self.responses = responses
                self.response_fields = {
                    code: _response_field(r["model"]) for code, r in responses.items() if r.get("model")
                }
                self._deferred = None
            finally:
                self._building = None

    def get_route_handler(self) -> Handler:
        inner = super().get_route_handler()
        plan = direct.plan(self.dependant)  # FastAPI's solver only where an endpoint needs it
        if plan is not None:
            inner = direct.handler(plan, inner)

        async def handler(request: Request) -> Response:
            request = StrictJSONRequest(request.scope, request.receive)
            await self.authenticate(request)
            try:
                return await inner(request)
            finally:
                end_context(request)

        return handler


class UserRoute(_CloudletRoute):
    READ_ERRORS = (400, 401, 403, 404, 503)
    WRITE_ERRORS = (400, 401, 403, 404, 409, 503)

    async def authenticate(self, request: Request) -> None:
        await authenticate_user(request)
        # The client's request id goes into the audit entries this request writes (set in the
        # request's task: the thread that runs a sync endpoint copies its context).
        audit.bind_request_id(audit.request_id_from(request.headers))
        # The scope's path, not ``request.url``: building the URL (host, query) cost ~10 µs.
        audit.bind_channel(audit.api_channel(request.scope["path"], request.headers))


class NodeRoute(_CloudletRoute):
    READ_ERRORS = WRITE_ERRORS = (400, 401, 403, 404, 409, 503)

    async def authenticate(self, request: Request) -> None:
        await authenticate_node(request)


class PublicRoute(_CloudletRoute):
    async def authenticate(self, request: Request) -> None:
        return None
