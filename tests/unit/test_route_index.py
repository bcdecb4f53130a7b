"""The router index (``api/route_index.py``) picks the route Starlette's walk picks, for every route
of the real app: a concrete path made from each route's template, with each of its methods (the
full match), with a method it lacks (the partial match: 405), and with its trailing slash added or
taken off (what the walk redirects or answers 404); and the whole app answers as it does without
the index (200, 404, 405, the trailing-slash redirect)."""

from __future__ import annotations

import re
import types
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRouter
from fastapi.testclient import TestClient
from starlette.routing import BaseRoute, Match, Mount, WebSocketRoute

from cloudlet.api import route_index
from cloudlet.api.app import create_app
from cloudlet.api.route_index import ANY, RouteIndex, leading_pattern
from cloudlet.studio import app as studio

PARAM = re.compile(r"{([a-zA-Z_][a-zA-Z0-9_]*)(?::([a-z]+))?}")
SAMPLES = {"int": "7", "float": "1.5", "uuid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "path": "a/b.txt"}
UNUSED_METHOD = "PURGE"  # no route takes it: every full match becomes a partial one


def _app() -> FastAPI:
    app = create_app(types.SimpleNamespace(installation_id="i", replica_id="r"))  # type: ignore[arg-type]
    studio.install(app)  # as server.serve does, after create_app
    return app


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return _app()


def _concrete(template: str) -> str:
    """TEMPLATE with each parameter given a value its converter takes."""
    return PARAM.sub(lambda m: SAMPLES.get(m.group(2) or "str", f"v-{m.group(1)}"), template)


def _scope(path: str, method: str | None) -> dict[str, object]:
    """An HTTP scope (METHOD given) or a WebSocket one (METHOD None) for PATH."""
    kind = "websocket" if method is None else "http"
    scope: dict[str, object] = {"type": kind, "path": path, "root_path": "", "headers": []}
    if method is not None:
        scope["method"] = method
    return scope


def _walk(routes: list[BaseRoute], scope: dict[str, object]) -> tuple[Match, BaseRoute | None]:
    """Starlette's rule: the first full match in order, else the first partial one."""
    partial = None
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return match, route
        if match is Match.PARTIAL and partial is None:
            partial = route
    return (Match.PARTIAL, partial) if partial is not None else (Match.NONE, None)


def _templates(route: BaseRoute, prefix: str = "") -> Iterator[tuple[str, list[str] | None]]:
    """(concrete path, methods; None for a WebSocket) of ROUTE, or of each route of an included
    router (under its prefix)."""
    context = getattr(route, "include_context", None)
    if context is not None:  # an included router: its routes, under its prefix
        for inner in route.original_router.routes:  # type: ignore[attr-defined]
            yield from _templates(inner, prefix + context.prefix)
        return
    path = _concrete(prefix + str(getattr(route, "path", ""))) + ("/x" if isinstance(route, Mount) else "")
    if isinstance(route, WebSocketRoute):
        yield path, None
    else:
        yield path, sorted(getattr(route, "methods", None) or {"GET"})


def _requests(route: BaseRoute) -> Iterator[tuple[str, str | None]]:
    """(path, method) pairs made from ROUTE's template: its own methods, one it lacks, and the
    path with its trailing slash changed."""
    for path, methods in _templates(route):
        other = path[:-1] if path.endswith("/") and len(path) > 1 else path + "/"
        for method in [*methods, UNUSED_METHOD] if methods is not None else [None]:
            yield path, method
            yield other, method


def test_every_route_is_found_through_the_index_as_through_the_walk(app: FastAPI) -> None:
    index = RouteIndex(app.router)
    routes = list(app.router.routes)
    assert len(routes) > 200  # the real app, studio included
    checked = 0
    for route in routes:
        for path, method in _requests(route):
            candidates = index.candidates(path)
            assert candidates is not None
            scope = _scope(path, method)
            assert _walk(candidates, scope) == _walk(routes, scope), (route, path, method)
            checked += 1
        # the route's own request reaches this route or one registered before it that also matches
        path, method = next(_requests(route))
        _, found = _walk(routes, _scope(path, method))
        assert found is not None and routes.index(found) <= routes.index(route), (route, path, found)
    assert checked > 4 * len(routes)


def test_paths_matching_no_route_have_no_candidate_that_matches(app: FastAPI) -> None:
    index = RouteIndex(app.router)
    routes = list(app.router.routes)
    for path in (
        "/",
        "/nope",
        "/api",
        "/api/v1",
        "/api/v1/nope/deeper",
        "/healthz/x",
        "//",
        "/studio/static",
    ):
        for method in ("GET", "POST", UNUSED_METHOD):
            candidates = index.candidates(path)
            assert candidates is not None
            assert _walk(candidates, _scope(path, method)) == _walk(routes, _scope(path, method)), path


def test_the_index_narrows_the_hot_paths_to_a_few_candidates(app: FastAPI) -> None:
    index = RouteIndex(app.router)
    healthz = index.candidates("/healthz")
    assert healthz is not None and len(healthz) <= 3, healthz
    show = "/api/v1/subscriptions/s/resourceGroups/rg/workspaces/ws/computes/c"
    candidates = index.candidates(show)
    assert candidates is not None
    assert len(candidates) <= 12, [getattr(route, "path", route) for route in candidates]
    assert getattr(_walk(candidates, _scope(show, "GET"))[1], "name", None) == "show_compute"


def test_first_registered_wins_and_a_method_mismatch_is_the_first_partial() -> None:
    router = APIRouter()

    @router.get("/a/{x}")
    def by_param(x: str) -> str:
        return "param"

    @router.post("/a/b")
    def literal_post() -> str:
        return "post"

    @router.get("/a/b")
    def literal_get() -> str:
        return "literal"

    @router.delete("/c/d")
    def only_delete() -> str:
        return "deleted"

    app = FastAPI()
    app.router.routes.extend(router.routes)
    route_index.install(app.router)
    client = TestClient(app)
    assert client.get("/a/b").json() == "param"  # the template registered first, not the literal
    assert client.post("/a/b").json() == "post"
    refused = client.put("/a/b")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET"  # /a/{x}: the first partial
    assert client.get("/c/d").status_code == 405
    assert client.get("/c/e").status_code == 404
    assert client.get("/a/b/", follow_redirects=False).status_code == 307  # the whole router's redirect


def test_the_app_answers_as_it_does_without_the_index(app: FastAPI) -> None:
    plain = _app()
    plain.router.middleware_stack = plain.router.app  # the walk, as Starlette has it
    assert isinstance(app.router.middleware_stack, RouteIndex)
    asks = [
        ("GET", "/healthz"),
        ("POST", "/healthz"),
        ("GET", "/healthz/"),
        ("GET", "/no/such/path"),
        ("DELETE", "/studio/static/app.css"),
        ("GET", "/openapi.json/"),
    ]
    indexed_client, plain_client = TestClient(app), TestClient(plain)  # no lifespan: no loops
    for method, path in asks:
        got = indexed_client.request(method, path, follow_redirects=False)
        want = plain_client.request(method, path, follow_redirects=False)
        assert (got.status_code, got.headers.get("allow"), got.headers.get("location")) == (
            want.status_code,
            want.headers.get("allow"),
            want.headers.get("location"),
        ), (method, path)
        if path == "/healthz" and method == "GET":
            assert got.json() == {"status": "ok", "installation": "i", "replica": "r"}


def test_leading_patterns() -> None:
    router = APIRouter()

    @router.get("/api/v1/jobs/{name}/files{rest:path}")
    def files(name: str, rest: str) -> None:
        return None

    @router.get("/api/v1/things/{n:int}/{rest:path}")
    def things(n: int, rest: str) -> None:
        return None

    @router.get("/api/v1/{name}.json")
    def document(name: str) -> None:
        return None

    assert [leading_pattern(route) for route in router.routes] == [
        ("api", "v1", "jobs", ANY),
        ("api", "v1", "things", ANY),
        ("api", "v1"),
    ]
    assert leading_pattern(Mount("/studio/static", app=FastAPI())) == ("studio", "static")
    assert leading_pattern(Mount("", app=FastAPI())) is None  # at the root: every path
    assert leading_pattern(BaseRoute()) is None  # a class of its own: every path
