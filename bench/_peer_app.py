"""The peer: the smallest uvicorn + FastAPI app that does what ``compute show`` must do on the wire.

It checks ``Authorization: Bearer <key>`` and answers a constant JSON body (the bytes of the real
compute document, so the same size) on the same path template as cloudlet's compute show. Run as its
own process with the settings cloudlet uses (httptools, uvloop, access log off, log level warning):

    python bench/_peer_app.py HOST PORT BODIES_JSON     (env BENCH_PEER_KEY = the accepted key)

BODIES_JSON maps compute name -> the exact document text to serve for that name,
``job:<name>`` -> the document of job show (``GET {ws}/jobs/{name}``), and optionally
``jobs:list`` -> the document of job list (``GET {ws}/jobs``) and ``jobs:put`` -> the answer to a
job submission (``PUT {ws}/jobs/{name}``: the JSON body is read and parsed, then 201).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request, Response

WS = "/api/v1/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
UNAUTHORIZED = b'{"error":{"code":"Unauthorized","message":"missing or invalid bearer token"}}'
NOT_FOUND = b'{"error":{"code":"NotFound","message":"no such compute"}}'


def create_app(bodies: dict[str, bytes], api_key: str) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    expected = f"Bearer {api_key}"

    @app.get("/healthz")
    async def healthz() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    @app.get(WS + "/computes/{name}")
    async def show(sub: str, rg: str, ws: str, name: str, request: Request) -> Response:
        if request.headers.get("authorization") != expected:
            return Response(UNAUTHORIZED, 401, media_type="application/json")
        body = bodies.get(name)
        if body is None:
            return Response(NOT_FOUND, 404, media_type="application/json")
        return Response(body, media_type="application/json")

    @app.get(WS + "/jobs/{name}")
    async def show_job(sub: str, rg: str, ws: str, name: str, request: Request) -> Response:
        return await show(sub, rg, ws, f"job:{name}", request)

    @app.get(WS + "/jobs")
    async def list_jobs(sub: str, rg: str, ws: str, request: Request) -> Response:
        return await show(sub, rg, ws, "jobs:list", request)

    @app.put(WS + "/jobs/{name}")
    async def submit_job(sub: str, rg: str, ws: str, name: str, request: Request) -> Response:
        if request.headers.get("authorization") != expected:
            return Response(UNAUTHORIZED, 401, media_type="application/json")
        json.loads(await request.body())  # a submission's body is parsed, as cloudlet's is
        return Response(bodies.get("jobs:put", b"{}"), 201, media_type="application/json")

    return app


def main(argv: list[str]) -> None:
    host, port, bodies_path = argv[1], int(argv[2]), Path(argv[3])
    raw: dict[str, str] = json.loads(bodies_path.read_text())
    bodies = {name: text.encode() for name, text in raw.items()}
    app = create_app(bodies, os.environ["BENCH_PEER_KEY"])
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main(sys.argv)
