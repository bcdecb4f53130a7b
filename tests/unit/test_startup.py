"""What a process pays to start (docs/performance.md, "Start-up"): the API's routes are built on
first use, the server does not import what one rare path needs, and the entry points import with
the collector paused (cloudlet/startup.py)."""

from __future__ import annotations

import subprocess
import sys
import types

from fastapi.routing import APIRoute

from cloudlet.api.app import create_app
from cloudlet.api.routing import _CloudletRoute
from cloudlet.studio import app as studio

WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
# Built by FastAPI's ``APIRoute.__init__``: the costly part of making a route.
BUILT = ("dependant", "body_field", "response_field", "response_fields", "app")


def _app() -> tuple[object, list[_CloudletRoute]]:
    app = create_app(types.SimpleNamespace(installation_id="i", replica_id="r"))  # type: ignore[arg-type]
    studio.install(app)
    return app, [route for route in app.router.routes if isinstance(route, _CloudletRoute)]


def _python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# The routes are made once per process (at import) and shared by every app made from them: what
# is built or not is seen in a fresh interpreter.
FRESH = """
import types
from fastapi.testclient import TestClient
from cloudlet.api.app import create_app
from cloudlet.api.routing import _CloudletRoute
from cloudlet.studio import app as studio
app = create_app(types.SimpleNamespace(installation_id="i", replica_id="r"))
studio.install(app)
routes = [route for route in app.router.routes if isinstance(route, _CloudletRoute)]
built = lambda: [r.name for r in routes if any(n in vars(r) for n in %r)]
ws = "/api/v1/subscriptions/s/resourceGroups/g/workspaces/w"
"""


def test_making_the_app_builds_no_route_and_first_use_builds_it() -> None:
    shown = _python(
        FRESH % (BUILT,)
        + "print(len(routes), built())\n"
        + "show = next(r for r in routes if r.name == 'show_compute')\n"
        + "compiled = 'path_regex' in vars(show)\n"
        + "print(compiled, bool(show.path_regex.match(ws + '/computes/c1')), built())\n"  # needs no build
        + "print([p.name for p in show.dependant.path_params], built())\n"  # read: built
    ).splitlines()
    count, nothing = shown[0].split(" ", 1)
    assert int(count) > 300 and nothing == "[]"  # nearly every route is one of ours, none built
    assert shown[1] == "False True []"  # the path compiled when first matched
    assert shown[2] == "['sub', 'rg', 'ws', 'name'] ['show_compute']"


def test_a_request_builds_the_route_it_reaches_and_no_other() -> None:
    shown = _python(
        FRESH % (BUILT,)
        + "client = TestClient(app)\n"  # no lifespan: the app's state is a stub
        + "print(client.get(ws + '/computes/c1').status_code)\n"
        + "print(client.get(ws + '/nowhere/c1').status_code)\n"
        + "print(built())\n"
    ).splitlines()
    assert shown == ["401", "404", "['show_compute']"]  # the 404 walked every route, built none


def test_every_route_builds_as_fastapi_would() -> None:
    _, routes = _app()
    for route in routes:
        route.build()
        reference = APIRoute(route.path, route.endpoint, methods=route.methods, name=route.name)
        assert route.unique_id and route.path_format == reference.path_format, route.path
        assert [p.name for p in route.dependant.path_params] == [
            p.name for p in reference.dependant.path_params
        ], route.path
    # one adapter per documented error body (cloudlet's, MLflow's), not one per route and code
    documented = {id(field) for r in routes for field in r.response_fields.values()}
    assert len(documented) == 2


def test_the_server_does_not_import_httpx_nor_the_cli_the_server_or_the_models() -> None:
    loaded = _python("import sys, cloudlet.server; print(' '.join(sorted(sys.modules)))").split()
    assert "httpx" not in loaded and "websockets.asyncio.client" not in loaded
    loaded = _python("import sys, cloudlet.cli.main; print(' '.join(sorted(sys.modules)))").split()
    assert not {"fastapi", "sqlalchemy", "starlette", "uvicorn", "cloudlet.server"} & set(loaded)
    # nor the documents' models (pydantic): a command that checks one imports them when it does
    models = {"pydantic", "cloudlet.domain.jobs.job_models", "cloudlet.domain.compute.compute_spec"}
    assert not models & set(loaded)


def test_load_imports_with_the_collector_paused_then_frozen_and_running() -> None:
    shown = _python(
        "import gc, sys\n"
        "from cloudlet.startup import load\n"
        "collections = []\n"
        "gc.callbacks.append(lambda phase, info: collections.append(info['generation']))\n"
        "load('cloudlet.server')\n"
        "print(len(collections), gc.isenabled(), gc.get_freeze_count() > 100_000)"
    )
    assert shown == "0 True True"


def test_startup_main_runs_the_modules_main_with_the_rest_of_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cloudlet.startup", "cloudlet.server_command", "--workers", "none"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2  # argparse's: --workers none is not a count
    assert "cloudlet server: error: --workers" in done.stderr


def test_cloudlet_server_goes_to_the_servers_parser_without_the_cli() -> None:
    shown = _python(
        "import sys\n"
        "sys.argv = ['cloudlet', 'server', '--workers', 'none']\n"
        "from cloudlet.startup import cli\n"
        "try:\n"
        "    cli()\n"
        "except SystemExit as exc:\n"
        "    print(exc.code, 'cloudlet.cli.main' in sys.modules, 'cloudlet.server' in sys.modules)"
    )
    assert shown == "2 False True"  # argparse's error (stderr: --workers), the CLI never loaded


def test_the_bodies_json_schemas_are_made_with_the_document_not_at_import() -> None:
    shown = _python(
        "import pydantic\n"
        "calls = []\n"
        "made = pydantic.BaseModel.model_json_schema.__func__\n"
        "def counted(cls, *args, **kwargs):\n"
        "    calls.append(cls.__name__)\n"
        "    return made(cls, *args, **kwargs)\n"
        "pydantic.BaseModel.model_json_schema = classmethod(counted)\n"
        + FRESH % (BUILT,)
        + f"WS = {WS!r}\n"
        + "print(len(calls))\n"
        + "doc = app.openapi()\n"
        + "put = doc['paths']['/api/v1' + WS + '/jobs/{name}']\n"
        + "body = put['put']['requestBody']['content']['application/json']['schema']\n"
        + "print('CommandJobSpec' in calls, sorted(body['properties'])[:3])\n"
    ).splitlines()
    assert shown[0] == "0"
    assert shown[1] == "True ['$schema', 'code', 'command']"  # CommandJobSpec's, made by openapi()


def test_a_read_while_another_thread_builds_the_route_waits_for_the_build(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The builder's own reads of what FastAPI has not set yet are AttributeErrors (``__getattr__``);
    another thread's read must wait for the build, not get one."""
    import threading

    entered, go_on = threading.Event(), threading.Event()
    real_init = APIRoute.__init__

    def held_init(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        entered.set()
        assert go_on.wait(30)
        real_init(self, *args, **kwargs)

    def ping(item: int) -> dict[str, int]:
        return {"item": item}

    route = _CloudletRoute("/ping/{item}", ping, methods=["GET"])
    monkeypatch.setattr(APIRoute, "__init__", held_init)
    builder = threading.Thread(target=route.build)
    builder.start()
    assert entered.wait(30)
    seen: list[object] = []

    def read() -> None:
        try:
            seen.append([p.name for p in route.dependant.path_params])
        except AttributeError as error:
            seen.append(error)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(0.2)  # the reader is held by the build's lock, not answered an AttributeError
    held = reader.is_alive()
    go_on.set()
    builder.join(30)
    reader.join(30)
    assert held and seen == [["item"]]
