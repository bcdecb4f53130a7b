"""The online endpoints' gateway: ``{server}/online/{sub}/{rg}/{ws}/{endpoint}/score`` (issue 14).

An async proxy on the server's event loop (asyncio streams, ``_exchange``): it reads only
the in-memory view ``control/online_replicas.OnlineRuntime`` keeps of each endpoint, so a request
costs no store round trip. In order:

1. the endpoint's credential, before the body is read: a key (primary or secondary) or an
   ``aml_token`` as ``Authorization: Bearer …`` → else 401;
2. the deployment: the ``azureml-model-deployment`` header pins one (404 if it has none), else the
   traffic weights choose (404 when every weight is 0);
3. a ready replica (503 with the reason when none is), within the limit: more than
   2 × ``max_concurrent_requests_per_instance`` × ready replicas in flight → 429;
4. forward to the replica's ``/score``; past ``request_timeout_ms`` → 408; the model's non-200 →
   424 with ``ms-azureml-model-error-statuscode`` / ``-reason`` and the model's body;
   An autoscaled deployment with no ready replica (scaled to zero, or its replicas starting)
   holds the request, up to ``request_timeout_ms``, while the autoscaler starts one (the held
   request counts as load and wakes it); still none → 503 with ``Retry-After``;
5. ``mirror_traffic``: a share of requests is copied to the mirrored deployment; its answer is
   dropped.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.services.core import metrics
from cloudlet.services.endpoints import online_endpoints as service

if TYPE_CHECKING:
    from cloudlet.control.online_replicas import DeploymentState, EndpointState, OnlineRuntime


HOLD_POLL_S = 0.05  # how often a held request looks for a ready replica
RETRY_AFTER_S = 5  # a replica of the inference server starts in a few seconds
FORWARDED = ("content-type", "x-request-id", "x-ms-client-request-id", "accept")
# Azure Machine Learning's managed online endpoints refuse a scoring request over 1.5 MB with
# 413 (endpoint limits, "Troubleshoot online endpoints": 413 Payload too large); read as MiB.
MAX_SCORE_REQUEST_BYTES = 1_572_864
# Azure documents no limit on the answer; this gateway streams it and cuts it past 100 MiB, so
# one model cannot make the server hold an unbounded answer.
MAX_SCORE_ANSWER_BYTES = 100 << 20
STREAM_CHUNK = 64 << 10


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    import json

    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


class Gateway:
    """What the gateway holds across requests: the mirrored copies in flight."""

    def __init__(self) -> None:
        self.mirrors: set[asyncio.Task[None]] = set()

    async def close(self) -> None:
        for task in list(self.mirrors):
            task.cancel()


gateway = Gateway()


def _authorized(request: Request, endpoint: EndpointState, secret: str) -> bool:
    header = request.headers.get("authorization", "")
    scheme, _, credential = header.partition(" ")
    if scheme.lower() != "bearer" or not credential:
        return False
    if endpoint.auth_mode == "key":
        return any(
            hmac.compare_digest(credential, key) for key in (endpoint.primary, endpoint.secondary) if key
        )
    return service.token_valid(secret, endpoint.id, endpoint.primary, credential, time.time())


@dataclass
class Answer:
    """A replica's answer: its head, read; its body, streamed (and counted) as it is sent on."""

    status_code: int
    headers: dict[str, str]
    body: AsyncIterator[bytes]


class AnswerTooLarge(ValueError):
    pass


async def _exchange(
    host: str, port: int, method: str, body: bytes, headers: dict[str, str], deadline: float
) -> Answer:
    """One HTTP/1.1 exchange with a replica at (HOST, PORT) over asyncio streams. The inference
    server's gunicorn closes every connection after its answer, so there is no pool to keep; this
    costs ~1 ms less a request than httpx's AsyncClient (measured here: 0.74 vs 2.2 ms p50).
    Returns once the head is read; the body follows through ``Answer.body``, which closes the
    connection when done and stops past MAX_SCORE_ANSWER_BYTES or DEADLINE (time.monotonic())."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        lines = [f"{method} /score HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in headers.items() if k.lower() not in ("host", "content-length")]
        lines.append(f"Content-Length: {len(body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        answer_headers: dict[str, str] = {}
        for line in header_lines:
            name, sep, value = line.partition(":")
            if sep:
                answer_headers[name.strip().lower()] = value.strip()
        declared = answer_headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_SCORE_ANSWER_BYTES:
            raise AnswerTooLarge(f"the model's answer is {int(declared)} bytes")
    except BaseException:
        writer.close()
        raise
    return Answer(status, answer_headers, _body(reader, writer, answer_headers, deadline))


async def _body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict[str, str], deadline: float
) -> AsyncIterator[bytes]:
    """The answer's body in chunks as they arrive (Content-Length, chunked, or up to the close),
    at most MAX_SCORE_ANSWER_BYTES and until DEADLINE: past either the stream stops short and the
    client sees a cut answer, not a server holding it all in memory."""

    async def read(step: Awaitable[bytes]) -> bytes:
        return await asyncio.wait_for(step, max(0.001, deadline - time.monotonic()))

    sent = 0

    def count(chunk: bytes) -> bytes:
        nonlocal sent
        sent += len(chunk)
        if sent > MAX_SCORE_ANSWER_BYTES:
            raise AnswerTooLarge(f"the model's answer passed {MAX_SCORE_ANSWER_BYTES} bytes")
        return chunk

    try:
        if headers.get("content-length", "").isdigit():
            left = int(headers["content-length"])
            while left > 0:
                chunk = await read(reader.read(min(left, STREAM_CHUNK)))
                if not chunk:
                    break
                left -= len(chunk)
                yield count(chunk)
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            while size := int((await read(reader.readuntil(b"\r\n"))).split(b";")[0], 16):
                yield count(await read(reader.readexactly(size)))
                await read(reader.readexactly(2))
        else:
            while chunk := await read(reader.read(STREAM_CHUNK)):
                yield count(chunk)
    finally:
        writer.close()


@functools.lru_cache(maxsize=4096)
def _instruments(endpoint: str, deployment: str) -> tuple[Any, Any, Any]:
    """A deployment's labelled counters (requests, errors, latency), kept: ``labels()`` costs a lock
    and a key on every call."""
    labels = (endpoint, deployment)
    return (
        metrics.ONLINE_REQUESTS.labels(*labels),
        metrics.ONLINE_ERRORS.labels(*labels),
        metrics.ONLINE_DURATION.labels(*labels),
    )


def _failed(endpoint: str, deployment: DeploymentState) -> None:
    deployment.failures += 1
    _instruments(endpoint, deployment.name)[1].inc()


async def _send(
    runtime: OnlineRuntime,
    endpoint: str,
    deployment: DeploymentState,
    method: str,
    body: bytes,
    headers: dict[str, str],
) -> Answer | Response:
    replica = deployment.pick()
    if replica is None:
        return _error(
            503, "NoReadyReplica", deployment.reason or f"no replica of '{deployment.name}' is ready yet"
        )
    timeout = deployment.spec.request_settings["request_timeout_ms"] / 1000
    runtime.count_in_flight(deployment, replica, 1)
    started = time.perf_counter()

    def done() -> None:
        runtime.count_in_flight(deployment, replica, -1)
        spent_s = time.perf_counter() - started
        spent_ms = spent_s * 1000
        deployment.requests += 1
        deployment.latency_ms += spent_ms
        deployment.recent.append((time.time(), spent_ms))
        requests, _, latency = _instruments(endpoint, deployment.name)
        requests.inc()
        latency.observe(spent_s)

    try:
        deadline = time.monotonic() + timeout
        exchange = _exchange(replica.host, replica.port, method, body, headers, deadline)
        answer = await asyncio.wait_for(exchange, timeout)
    except TimeoutError:
        _failed(endpoint, deployment)
        done()
        return _error(
            408,
            "RequestTimeout",
            f"the model took longer than request_timeout_ms ({timeout * 1000:.0f} ms); raise "
            "request_settings.request_timeout_ms or make run() faster",
        )
    except AnswerTooLarge as exc:
        _failed(endpoint, deployment)
        done()
        return _error(
            502, "AnswerTooLarge", f"{exc}; the gateway passes at most {MAX_SCORE_ANSWER_BYTES} bytes"
        )
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        _failed(endpoint, deployment)
        done()
        return _error(502, "ReplicaUnreachable", f"replica of '{deployment.name}' did not answer: {exc}")
    except BaseException:
        done()
        raise
    return Answer(answer.status_code, answer.headers, _counted(answer.body, done))


async def _counted(body: AsyncIterator[bytes], done: Callable[[], None]) -> AsyncIterator[bytes]:
    """BODY, the request counted in flight until it has been sent (or given up)."""
    try:
        async for chunk in body:
            yield chunk
    except (TimeoutError, AnswerTooLarge, OSError, asyncio.IncompleteReadError, ValueError):
        return  # the answer is cut short: the client sees a closed or short body
    finally:
        await body.aclose()  # type: ignore[attr-defined]
        done()


async def _read_body(request: Request) -> bytes | Response:
    """The scoring request's body, refused with 413 past MAX_SCORE_REQUEST_BYTES (declared or
    counted while it arrives: nothing more is read)."""
    too_large = _error(
        413,
        "PayloadTooLarge",
        f"the request body is larger than {MAX_SCORE_REQUEST_BYTES} bytes (1.5 MiB), the most an "
        "online endpoint takes, as on Azure Machine Learning; send a reference to the data instead",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_SCORE_REQUEST_BYTES:
        return too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_SCORE_REQUEST_BYTES:
            return too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _mirror(
    runtime: OnlineRuntime,
    endpoint: str,
    deployment: DeploymentState,
    method: str,
    body: bytes,
    headers: dict[str, str],
) -> None:
    if rules.overloaded(
        runtime.in_flight(deployment),
        deployment.spec.request_settings["max_concurrent_requests_per_instance"],
        len(deployment.ready()),
    ):
        return
    answer = await _send(runtime, endpoint, deployment, method, body, headers)
    if isinstance(answer, Answer):  # the answer is dropped
        async for _ in answer.body:
            pass


async def _hold(runtime: OnlineRuntime, deployment: DeploymentState) -> int:
    """Wait (bounded by request_timeout_ms) for a ready replica of an autoscaled DEPLOYMENT; the
    number ready at the end."""
    deadline = time.monotonic() + deployment.spec.request_settings["request_timeout_ms"] / 1000
    deployment.waiting += 1
    runtime.autoscaler.wake.set()
    try:
        while not deployment.ready() and time.monotonic() < deadline and deployment.reason is None:
            await asyncio.sleep(HOLD_POLL_S)
    finally:
        deployment.waiting -= 1
    return len(deployment.ready())


class GatewayRoute(BaseRoute):
    """``/online/{sub}/{rg}/{ws}/{endpoint}/score`` as a plain ASGI route, placed first among the
    app's routes (``api/app.py``): a FastAPI route ~250 places down cost the gateway about half of
    its event-loop CPU in route matching and FastAPI's request handling (py-spy at 8 clients,
    docs/performance.md); this one is matched first, by one regular expression, and called with
    Starlette's Request as is (no dependencies, no body model: the body is the model's)."""

    PATH = re.compile(r"^/online/([^/]+)/([^/]+)/([^/]+)/([^/]+)/score$")
    path = "/online/{sub}/{rg}/{ws}/{endpoint}/score"  # its template, as metrics label requests
    METHODS = ("GET", "POST")

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http":
            found = self.PATH.match(scope["path"])
            if found is not None:
                return Match.FULL, {
                    "path_params": dict(zip(("sub", "rg", "ws", "endpoint"), found.groups(), strict=True)),
                    "route": self,  # FastAPI's router names only its own routes (metrics' label)
                }
        return Match.NONE, {}

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        if request.method not in self.METHODS:
            answer: Response = _error(
                405, "MethodNotAllowed", "the scoring URI takes POST (or GET)", {"Allow": "GET, POST"}
            )
        else:
            answer = await score(request, **scope["path_params"])
        await answer(scope, receive, send)


route = GatewayRoute()


async def score(request: Request, sub: str, rg: str, ws: str, endpoint: str) -> Response:
    runtime: OnlineRuntime = request.app.state.cloudlet.online
    state = runtime.by_path(sub, rg, ws, endpoint)
    if state is None:
        return _error(404, "EndpointNotFound", f"online endpoint '{endpoint}' was not found")
    if not _authorized(request, state, request.app.state.cloudlet.token_secret):
        return _error(
            401,
            "Unauthorized",
            f"a valid {'key' if state.auth_mode == 'key' else 'aml_token'} is needed as "
            "'Authorization: Bearer …' (online-endpoint get-credentials)",
            {"WWW-Authenticate": "Bearer"},
        )
    pinned = request.headers.get(rules.PINNED_HEADER)
    name = pinned or rules.choose(state.traffic, random.random())
    if name is None:
        return _error(
            404, "NoTraffic", f"endpoint '{endpoint}' sends no traffic: set traffic (--traffic \"blue=100\")"
        )
    deployment = state.deployments.get(name)
    if deployment is None:
        if pinned:
            return _error(404, "DeploymentNotFound", f"endpoint '{endpoint}' has no deployment '{pinned}'")
        return _error(503, "NoReadyReplica", f"deployment '{name}' has no ready replica yet")
    ready = len(deployment.ready())
    scaled = deployment.spec.scale_settings is not None
    if ready == 0 and scaled and deployment.reason is None:
        ready = await _hold(runtime, deployment)
    if ready == 0:
        waited = " within request_timeout_ms while a replica starts; retry" if scaled else ""
        return _error(
            503,
            "NoReadyReplica",
            (deployment.reason or f"no replica of '{name}' is ready yet") + waited,
            {"Retry-After": str(RETRY_AFTER_S)} if scaled else None,
        )
    limit = deployment.spec.request_settings["max_concurrent_requests_per_instance"]
    in_flight = runtime.in_flight(deployment)  # every worker's, under --workers
    if rules.overloaded(in_flight, limit, ready):
        return _error(
            429,
            "TooManyRequests",
            f"'{name}' has {in_flight} requests in flight, the most for {ready} replica(s) at "
            f"max_concurrent_requests_per_instance={limit}; retry, or raise instance_count",
        )
    body = await _read_body(request)
    if isinstance(body, Response):
        return body
    headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
    mirror_name = None if pinned else rules.mirrored(state.mirror, random.random())
    mirror = state.deployments.get(mirror_name) if mirror_name and mirror_name != name else None
    if mirror is not None:
        task = asyncio.create_task(_mirror(runtime, endpoint, mirror, request.method, body, headers))
        gateway.mirrors.add(task)
        task.add_done_callback(gateway.mirrors.discard)
    answer = await _send(runtime, endpoint, deployment, request.method, body, headers)
    if isinstance(answer, Response):
        answer.headers[rules.PINNED_HEADER] = name
        return answer
    out: dict[str, Any] = {rules.PINNED_HEADER: name}
    for header in ("x-request-id", "x-ms-request-id", "x-ms-client-request-id"):
        if header in answer.headers:
            out[header] = answer.headers[header]
    media = answer.headers.get("content-type")
    if answer.status_code != 200:
        _failed(endpoint, deployment)
        out["ms-azureml-model-error-statuscode"] = str(answer.status_code)
        out["ms-azureml-model-error-reason"] = "model_error"
    status = 200 if answer.status_code == 200 else 424
    if answer.headers.get("content-length", "").isdigit():
        out["content-length"] = answer.headers["content-length"]
    return StreamingResponse(answer.body, status_code=status, headers=out, media_type=media)
