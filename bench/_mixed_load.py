"""A mixed-route HTTP/1.1 load on asyncio (uvloop when available): many closed-loop readers, a
few paced writers, and a paced health probe, all for one bounded time window.

Same wire code as ``bench/_loadgen.py`` (a pre-built request, the response read by
Content-Length), so cloudlet and the peer pay the same client overhead. Each client is one
keep-alive connection that sends one request at a time and cycles through its own list of routes.
A reader sends its next request as soon as the last one is answered (closed loop); a paced
client (``interval_s``) starts one request every interval (or at once when it is late). Every
request has a deadline of its own; a connection that fails is counted, closed and opened again.
The whole run is bounded by its duration, a request count and a hard stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from bench._loadgen import READ_LIMIT, RunResult, _read_response

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
    uvloop = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Route:
    """One kind of request. ``{n}`` in PATH or BODY is replaced by a number unique to the run
    (a fresh job name per submission)."""

    key: str
    method: str
    path: str
    body: str | None = None
    ok: tuple[int, ...] = (200,)
    headers: tuple[tuple[str, str], ...] = ()

    def request(self, host: str, port: int, n: int) -> bytes:
        path = self.path.replace("{n}", str(n))
        lines = [f"{self.method} {path} HTTP/1.1", f"Host: {host}:{port}", "Accept: application/json"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        payload = b""
        if self.body is not None:
            payload = self.body.replace("{n}", str(n)).encode()
            lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


@dataclass(frozen=True)
class Client:
    routes: tuple[Route, ...]
    interval_s: float | None = None  # None: closed loop; else one request per interval
    start: int = 0  # index of its first route (spreads the readers over the routes)


@dataclass
class MixedResult:
    by_route: dict[str, RunResult] = field(default_factory=dict)
    wall_s: float = 0.0
    sent: int = 0
    reconnects: int = 0
    timed_out: bool = False
    # Successful answers' numbers ({n}) per route: the jobs a submitter had accepted.
    accepted: dict[str, list[int]] = field(default_factory=dict)
    # Numbers whose answer never came (connection lost mid-request): created or not, unknown.
    unanswered: dict[str, list[int]] = field(default_factory=dict)


async def _run(
    endpoint: str,
    clients: list[Client],
    duration_s: float,
    max_requests: int,
    request_timeout_s: float,
) -> MixedResult:
    parts = urlsplit(endpoint)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    result = MixedResult()
    for client in clients:
        for route in client.routes:
            result.by_route.setdefault(route.key, RunResult())
            result.accepted.setdefault(route.key, [])
            result.unanswered.setdefault(route.key, [])
    counter = itertools.count(1)
    began = time.monotonic()
    deadline = began + duration_s

    async def worker(client: Client) -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        routes = itertools.cycle(client.routes[client.start :] + client.routes[: client.start])
        next_at = time.monotonic()
        try:
            while time.monotonic() < deadline and result.sent < max_requests:
                if client.interval_s is not None:
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                        if time.monotonic() >= deadline:
                            return
                    next_at = max(next_at + client.interval_s, time.monotonic())
                route, n = next(routes), next(counter)
                stats = result.by_route[route.key]
                result.sent += 1
                started = time.perf_counter_ns()
                try:
                    if writer is None:
                        reader, writer = await asyncio.wait_for(
                            asyncio.open_connection(host, port, limit=READ_LIMIT), request_timeout_s
                        )
                    assert reader is not None
                    writer.write(route.request(host, port, n))
                    status, length = await asyncio.wait_for(_read_response(reader), request_timeout_s)
                except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                    what = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
                    stats.note_error(f"{what} after {(time.perf_counter_ns() - started) / 1e6:.0f} ms")
                    result.unanswered[route.key].append(n)
                    if writer is not None:
                        writer.close()
                    reader = writer = None
                    result.reconnects += 1
                    await asyncio.sleep(0.05)  # a refused connection must not spin
                    continue
                elapsed = time.perf_counter_ns() - started
                if status not in route.ok:
                    stats.note_error(f"HTTP {status}")
                    continue
                stats.latencies_ns.append(elapsed)
                stats.bytes_received += length
                result.accepted[route.key].append(n)
        finally:
            if writer is not None:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    tasks = [asyncio.create_task(worker(c)) for c in clients]
    # A hard stop after the window: the last requests get their own deadline to finish.
    _, pending = await asyncio.wait(tasks, timeout=duration_s + request_timeout_s + 5)
    for task in pending:
        task.cancel()
        result.timed_out = True
    if pending:
        await asyncio.wait(pending, timeout=5)
    result.wall_s = time.monotonic() - began
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            result.by_route[clients[0].routes[0].key].note_error(f"client crashed: {exc!r}")
    for stats in result.by_route.values():
        stats.wall_s = result.wall_s
    return result


def run_mixed(
    endpoint: str,
    clients: list[Client],
    *,
    duration_s: float,
    max_requests: int = 5_000_000,
    request_timeout_s: float = 30.0,
) -> MixedResult:
    """Run CLIENTS against ENDPOINT for DURATION_S seconds (at most MAX_REQUESTS requests)."""
    coro = _run(endpoint, clients, duration_s, max_requests, request_timeout_s)
    if uvloop is not None:
        return uvloop.run(coro)
    return asyncio.run(coro)
