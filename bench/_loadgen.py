"""A small, low-overhead HTTP/1.1 keep-alive load generator on asyncio (uvloop when available).

One code path for every series (cloudlet and peer alike), so client overhead is the same on both
sides of a ratio. Each connection sends one GET at a time and reads the response by Content-Length;
latency is measured per request with ``time.perf_counter_ns``. Every run is bounded twice: by a
request count and by a wall-clock deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

try:  # same loop family as the servers; plain asyncio works too
    import uvloop
except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
    uvloop = None  # type: ignore[assignment]

READ_LIMIT = 1 << 20


@dataclass
class RunResult:
    """Latencies (ns) of the requests that completed, plus what went wrong and how long it took."""

    latencies_ns: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    bytes_received: int = 0
    timed_out: bool = False

    def note_error(self, message: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(message)


def _request_bytes(url: str, headers: dict[str, str]) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 80
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}:{port}", "Accept: application/json"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return host, port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, int]:
    """Read one response; return (status, body length). Only Content-Length framing is supported."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, _, header_block = head.partition(b"\r\n")
    status = int(status_line.split(b" ", 2)[1])
    length = -1
    for line in header_block.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
            break
    if length < 0:
        raise RuntimeError("response without Content-Length (chunked bodies are not supported)")
    if length:
        await reader.readexactly(length)
    return status, length


async def _run(
    url: str, headers: dict[str, str], total: int, concurrency: int, time_limit_s: float
) -> RunResult:
    host, port, request = _request_bytes(url, headers)
    result = RunResult()
    remaining = total
    deadline = time.monotonic() + time_limit_s

    async def worker() -> None:
        nonlocal remaining
        reader, writer = await asyncio.open_connection(host, port, limit=READ_LIMIT)
        try:
            while remaining > 0:
                if time.monotonic() > deadline:
                    result.timed_out = True
                    return
                remaining -= 1
                started = time.perf_counter_ns()
                writer.write(request)
                status, length = await _read_response(reader)
                elapsed = time.perf_counter_ns() - started
                if status != 200:
                    result.note_error(f"HTTP {status}")
                    continue
                result.latencies_ns.append(elapsed)
                result.bytes_received += length
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    started = time.perf_counter()
    tasks = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, total)))]
    # Hard stop a little after the soft deadline in case a server stops answering mid-request.
    done, pending = await asyncio.wait(tasks, timeout=time_limit_s + 10)
    for task in pending:
        task.cancel()
        result.timed_out = True
    if pending:
        await asyncio.wait(pending, timeout=5)
    result.wall_s = time.perf_counter() - started
    for task in done:
        exc = task.exception()
        if exc is not None:
            result.note_error(f"{type(exc).__name__}: {exc}")
    return result


def run_load(
    url: str,
    headers: dict[str, str] | None = None,
    *,
    total: int,
    concurrency: int = 1,
    time_limit_s: float = 120.0,
) -> RunResult:
    """Send TOTAL GETs to URL over CONCURRENCY keep-alive connections (each strictly sequential)."""
    coro = _run(url, headers or {}, total, concurrency, time_limit_s)
    if uvloop is not None:
        return uvloop.run(coro)
    return asyncio.run(coro)
