"""api/direct.py: which routes skip FastAPI's dependency solver, and that those answer as FastAPI
would: the same values, defaults and aliases, and FastAPI's own 4xx for what does not validate."""

from __future__ import annotations

import threading
import types
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Path, Query, Request, Response
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from cloudlet.api import direct
from cloudlet.api.app import create_app
from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.api.routing import PublicRoute


def _routes_by_name() -> dict[str, list[APIRoute]]:
    app = create_app(types.SimpleNamespace(installation_id="i", replica_id="r"))  # type: ignore[arg-type]
    named: dict[str, list[APIRoute]] = {}
    for route in app.router.routes:
        if isinstance(route, APIRoute):
            named.setdefault(route.name, []).append(route)
    return named


def test_the_hot_reads_are_planned_and_routes_with_a_body_are_not() -> None:
    routes = _routes_by_name()
    for name in ("show_compute", "show_job", "list_jobs", "delete_compute", "show_operation"):
        assert all(direct.plan(r.dependant) is not None for r in routes[name]), name
    for name in ("create_or_update_compute", "create_job", "poll"):  # a body, or a node's request
        assert all(direct.plan(r.dependant) is None for r in routes[name]), name
    show = direct.plan(routes["show_compute"][0].dependant)
    assert show is not None
    assert [name for name, _ in show.plain_path] == ["sub", "rg", "ws", "name"]
    assert not show.checked_path and not show.is_coroutine
    job = direct.plan(routes["show_job"][0].dependant)
    assert job is not None and [f.name for f in job.checked_path] == ["name"]  # JobName's pattern


def _app() -> tuple[FastAPI, list[str]]:
    seen: list[str] = []
    router = APIRouter(route_class=PublicRoute)

    @router.get("/things/{kind}/{name}")
    def show(
        kind: str,
        name: Annotated[str, Path(pattern="^[a-z]+$")],
        request: Request,
        top: Annotated[int, Query(alias="$top", ge=1, le=10)] = 5,
        tag: Annotated[str | None, Query(max_length=3)] = None,
        state: AppState = Depends(app_state),
    ) -> Response:
        seen.append(threading.current_thread().name)
        return json_response(
            {"kind": kind, "name": name, "top": top, "tag": tag, "state": state, "path": request.url.path}
        )

    @router.get("/async/{name}")
    async def show_async(name: str) -> Response:
        seen.append(threading.current_thread().name)
        return json_response({"name": name})

    @router.put("/things/{name}")
    def put(name: str, body: dict[str, Any] = Body()) -> Response:
        return json_response({"name": name, "body": body})

    app = FastAPI()
    app.state.cloudlet = "the state"
    app.include_router(router)
    return app, seen


def test_a_planned_route_gets_the_values_fastapi_would_give() -> None:
    app, seen = _app()
    with TestClient(app) as client:
        answer = client.get("/things/box/abc", params={"$top": "3", "tag": "x"})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "kind": "box",
            "name": "abc",
            "top": 3,
            "tag": "x",
            "state": "the state",
            "path": "/things/box/abc",
        }
        assert client.get("/things/box/abc").json()["top"] == 5  # the default
        assert seen and all(name.startswith("cloudlet-request") for name in seen)  # direct.THREADS
        seen.clear()
        assert client.get("/async/zed").json() == {"name": "zed"}
        assert len(seen) == 1 and not seen[0].startswith("cloudlet-request")  # on the loop
        assert client.put("/things/abc", json={"a": 1}).json() == {"name": "abc", "body": {"a": 1}}


def test_what_does_not_validate_gets_fastapis_own_answer() -> None:
    app, seen = _app()
    with TestClient(app) as client:
        for path, params, where in [
            ("/things/box/ABC", {}, ["path", "name"]),
            ("/things/box/abc", {"$top": "0"}, ["query", "$top"]),
            ("/things/box/abc", {"$top": "many"}, ["query", "$top"]),
            ("/things/box/abc", {"tag": "long"}, ["query", "tag"]),
        ]:
            answer = client.get(path, params=params)
            assert answer.status_code == 422, answer.text  # FastAPI's default handler, unchanged
            assert [error["loc"] for error in answer.json()["detail"]] == [where]
    assert seen == []  # the endpoint never ran


def _query_app(route_class: type[APIRoute]) -> tuple[FastAPI, APIRoute]:
    """One endpoint with every kind of query parameter whose absence FastAPI answers differently:
    a plain default, a mutable default the endpoint changes, a repeated one, a required one, a
    default factory, a default that is validated and an alias."""
    router = APIRouter(route_class=route_class)

    @router.get("/q")
    def query(
        need: Annotated[int, Query()],
        tags: Annotated[list[str], Query()] = ["a"],  # noqa: B006 - FastAPI copies it per request
        top: Annotated[int, Query(alias="$top", ge=1)] = 5,
        flag: bool = False,
        made: Annotated[list[int], Query(default_factory=lambda: [7])] = ...,  # type: ignore[assignment]
        checked: Annotated[str, Query(validate_default=True, max_length=2)] = "ok",
        note: str | None = None,
    ) -> Response:
        shown = {"need": need, "tags": list(tags), "top": top, "flag": flag, "made": made}
        tags.append("changed")  # a later request must not see this
        return json_response({**shown, "checked": checked, "note": note})

    app = FastAPI()
    app.include_router(router)
    route = router.routes[0]
    assert isinstance(route, APIRoute)
    return app, route


def test_query_parameters_left_out_take_the_defaults_fastapi_gives() -> None:
    class Plain(APIRoute):  # FastAPI's own handler, for reference
        pass

    (ours_app, planned), (fastapi_app, _) = _query_app(PublicRoute), _query_app(Plain)
    assert direct.plan(planned.dependant) is not None
    queries = [
        "need=1",
        "need=1&tags=x&tags=y&$top=2&flag=true&made=3&checked=no&note=n",
        "need=1&tags=",
        "need=1&$top=0",
        "need=1&checked=far",
        "tags=x",
        "",
        "need=1&note=",
    ]
    with TestClient(ours_app) as ours, TestClient(fastapi_app) as fastapi:
        for query in queries + queries:  # twice: the mutable default is the same the second time
            mine, theirs = ours.get(f"/q?{query}"), fastapi.get(f"/q?{query}")
            assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json()), query
    assert ours.get("/q?need=2").json()["tags"] == ["a"]
