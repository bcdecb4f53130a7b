"""``python -m bench.read_cpu [--home DIR] [--requests N] [--batches K]``: the CPU one read request
costs in the server's own code, per route, without HTTP or other clients.

The app (``create_app`` and the studio, as ``cloudlet server`` builds them, no lifespan) is driven
through its ASGI callable, one request at a time, sync endpoints run inline (no thread hop): what
is left is the middleware stack, routing, authentication (a cached caller), the endpoint's store
statements, its view and its JSON. The store is ``mixed_load``'s (a warm 2-node cluster and a
cluster that ran 20 jobs): made by a real server in ``--home`` (kept for the next run) unless that
home is already seeded. The figure per route is the lowest of ``--batches`` batches of
``--requests`` requests (process CPU time), the least disturbed by other processes on a shared
machine. To compare two commits, run it alternately with each one's ``src`` first on
``PYTHONPATH`` (the app is imported from there), against one seeded home.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

ROUTES = ("compute_show", "job_list", "job_show", "healthz")


def seed(home: Path) -> None:
    """``mixed_load``'s store in HOME, made by a real server (stopped afterwards)."""
    from bench import mixed_load
    from bench._dispatch_client import Api, Db
    from bench._server import kill_node_processes, start_cloudlet

    saved = os.environ.get("CLOUDLET_WORKERS")
    os.environ["CLOUDLET_WORKERS"] = "1"  # the server's environment is a copy of ours
    try:
        server = start_cloudlet(home)
    finally:
        if saved is None:
            os.environ.pop("CLOUDLET_WORKERS", None)
        else:
            os.environ["CLOUDLET_WORKERS"] = saved
    try:
        api, db = Api(server), Db(home / "cloudlet.db")
        mixed_load._setup(api, db)
        api.close()
        db.close()
        (home / "bench-read-cpu.json").write_text(json.dumps({"ws": server.ws_path, "key": server.api_key}))
    finally:
        server.stop()
        kill_node_processes(home)


def measure(seeded: Path, requests: int, batches: int) -> dict[str, int]:
    """Per route, the lowest CPU µs a request over BATCHES batches, on a copy of SEEDED."""
    work = Path(tempfile.mkdtemp(prefix="cloudlet-read-cpu-"))
    home = work / "home"
    shutil.copytree(seeded, home, ignore=shutil.ignore_patterns("nodes", "*.log"))
    try:
        return asyncio.run(_measure(home, requests, batches))
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _measure(home: Path, requests: int, batches: int) -> dict[str, int]:
    from cloudlet import server
    from cloudlet.api import direct
    from cloudlet.api.app import create_app
    from cloudlet.studio import app as studio

    info = json.loads((home / "bench-read-cpu.json").read_text())
    state, _store = server.build_state(home, None, server.replica_identity(home))
    app = create_app(state)
    studio.install(app)

    async def inline(function: Any, values: dict[str, Any]) -> Any:
        return functools.partial(contextvars.copy_context().run, function, **values)()

    direct.THREADS.run = inline  # type: ignore[method-assign]
    ws, auth = info["ws"], f"Bearer {info['key']}".encode()
    paths = {
        "compute_show": (f"{ws}/computes/bench-load", b""),
        "job_list": (f"{ws}/jobs", b"compute=bench-seed"),
        "job_show": (f"{ws}/jobs/seed-0", b""),
        "healthz": ("/healthz", b""),
    }

    async def one(route: str) -> int:
        path, query = paths[route]
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": ("127.0.0.1", 8000),
            "client": ("127.0.0.1", 50000),
            "scheme": "http",
            "method": "GET",
            "root_path": "",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query,
            "headers": [
                (b"host", b"127.0.0.1:8000"),
                (b"accept", b"application/json"),
                (b"authorization", auth),
            ],
            "state": {},
        }
        statuses: list[int] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses.append(message["status"])

        await app(scope, receive, send)
        return statuses[0]

    out: dict[str, int] = {}
    for route in ROUTES:
        for _ in range(100):  # warm: imports, caches, the caller
            if (status := await one(route)) != 200:
                raise RuntimeError(f"{route} answered {status}")
        best = float("inf")
        for _ in range(batches):
            began = time.process_time()
            for _ in range(requests):
                await one(route)
            best = min(best, (time.process_time() - began) / requests)
        out[route] = round(best * 1e6)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.read_cpu", description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, default=Path(tempfile.gettempdir()) / "cloudlet-read-cpu-home")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args(argv)
    if not (args.home / "bench-read-cpu.json").exists():
        shutil.rmtree(args.home, ignore_errors=True)
        seed(args.home)
    print(json.dumps({"cpu_us_per_request": measure(args.home, args.requests, args.batches)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
