"""A mixed HTTP load for the load and fault tests: closed-loop readers, paced submitters and a
paced ``/healthz`` probe, on asyncio + httpx, against 127.0.0.1 only.

Every loop is bounded twice (the window's end, and a request count), every request has its own
timeout, and the whole run has a hard stop. Nothing is retried inside the window: a failure is
recorded (the load test asserts there are none; the fault test, which kills the server, expects
them while it is down). A submission whose answer never came is recorded as unanswered: the job
may or may not exist, and the fault test settles which after the server is back.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.conftest import RunningServer


@dataclass
class LoadReport:
    answered: Counter[str] = field(default_factory=Counter)  # route -> answers as expected
    failures: list[tuple[float, str, str]] = field(default_factory=list)  # (time.time(), route, why)
    worst_s: dict[str, float] = field(default_factory=dict)  # route -> slowest expected answer
    total_s: Counter[str] = field(default_factory=Counter)  # route -> time its expected answers took
    accepted: list[str] = field(default_factory=list)  # job names answered 201
    unanswered: list[str] = field(default_factory=list)  # job names whose PUT got no 201
    health_worst_s: float = 0.0
    began: float = 0.0
    ended: float = 0.0

    def note(self, route: str, took: float) -> None:
        self.answered[route] += 1
        self.worst_s[route] = max(self.worst_s.get(route, 0.0), took)
        self.total_s[route] += took

    def mean_s(self, *routes: str) -> float:
        """The mean time of the expected answers on ROUTES together."""
        count = sum(self.answered[route] for route in routes)
        return sum(self.total_s[route] for route in routes) / count if count else float("inf")


@dataclass(frozen=True)
class Load:
    """What to send. READS, (route, path) pairs, are cycled by each reader (reader i starts at
    read i mod n)."""

    reads: tuple[tuple[str, str], ...]
    submit_path: str  # "{ws}/jobs/" + name is appended
    job_body: Callable[[str], dict[str, Any]]
    prefix: str
    readers: int = 100
    submitters: int = 10
    submit_every_s: float = 0.5
    probe_every_s: float = 0.1
    request_timeout_s: float = 15.0
    max_requests: int = 200_000
    failure_pause_s: float = 0.05  # after a failed request: a server that is down is not spun on


async def _run(
    srv: RunningServer,
    load: Load,
    duration_s: float,
    report: LoadReport,
    stop: threading.Event | None = None,
) -> None:
    """Send LOAD for DURATION_S, or until STOP is set."""
    stop = stop or threading.Event()
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    headers = {"Authorization": f"Bearer {srv.api_key}"}
    names = itertools.count()
    sent = 0
    report.began = time.time()
    deadline = time.monotonic() + duration_s

    async def call(
        client: httpx.AsyncClient, route: str, method: str, path: str, ok: int, body: Any = None
    ) -> bool:
        nonlocal sent
        sent += 1
        started = time.monotonic()
        try:
            response = await client.request(method, path, json=body, timeout=load.request_timeout_s)
        except httpx.HTTPError as exc:  # refused, reset, or no answer within the timeout
            report.failures.append(
                (time.time(), route, f"{type(exc).__name__} after {time.monotonic() - started:.1f} s")
            )
            await asyncio.sleep(load.failure_pause_s)
            return False
        took = time.monotonic() - started
        if response.status_code != ok:
            report.failures.append(
                (time.time(), route, f"HTTP {response.status_code}: {response.text[:200]}")
            )
            return False
        report.note(route, took)
        return True

    def running() -> bool:
        return time.monotonic() < deadline and sent < load.max_requests and not stop.is_set()

    async def reader(client: httpx.AsyncClient, i: int) -> None:
        start = i % len(load.reads)
        for route, path in itertools.cycle(load.reads[start:] + load.reads[:start]):
            if not running():
                return
            await call(client, route, "GET", path, 200)

    async def paced(every_s: float, step: Callable[[], Any]) -> None:
        next_at = time.monotonic()
        while running():
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at + every_s, time.monotonic())
            if running():
                await step()

    async def submitter(client: httpx.AsyncClient) -> None:
        async def step() -> None:
            name = f"{load.prefix}-{next(names)}"
            answered = await call(client, "submit", "PUT", load.submit_path + name, 201, load.job_body(name))
            # Any answer but 201 leaves it unknown whether the job exists (settled afterwards).
            (report.accepted if answered else report.unanswered).append(name)

        await paced(load.submit_every_s, step)

    # One client (one connection) per task: a shared pool of a hundred connections costs the
    # client milliseconds of CPU per request (it scans its pool), which would make it the load's
    # bottleneck on a small machine.
    async def each(work: Callable[[httpx.AsyncClient], Any]) -> None:
        async with httpx.AsyncClient(base_url=srv.endpoint, headers=headers, limits=limits) as client:
            await work(client)

    tasks = [asyncio.create_task(each(lambda c, i=i: reader(c, i))) for i in range(load.readers)]
    tasks += [asyncio.create_task(each(submitter)) for _ in range(load.submitters)]
    prober = threading.Thread(target=_probe, args=(srv, load, deadline, report, stop), daemon=True)
    prober.start()
    _, pending = await asyncio.wait(tasks, timeout=duration_s + load.request_timeout_s + 10)
    await asyncio.to_thread(prober.join, load.request_timeout_s + 10)
    for task in pending:  # the hard stop: a request outliving its own timeout is a hang
        task.cancel()
        report.failures.append((time.time(), "client", "a client task had to be cancelled"))
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            report.failures.append((time.time(), "client", repr(task.exception())))
    report.ended = time.time()


def _probe(
    srv: RunningServer, load: Load, deadline: float, report: LoadReport, stop: threading.Event
) -> None:
    """``/healthz`` every ``probe_every_s`` from a thread of its own, so that its latency is the
    server's, not that of the load's busy event loop."""
    next_at = time.monotonic()
    with httpx.Client(base_url=srv.endpoint, timeout=load.request_timeout_s) as client:
        while time.monotonic() < deadline and not stop.is_set():
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at + load.probe_every_s, time.monotonic())
            started = time.monotonic()
            try:
                response = client.get("/healthz")
            except httpx.HTTPError as exc:
                report.failures.append((time.time(), "healthz", f"{type(exc).__name__}"))
                continue
            took = time.monotonic() - started
            if response.status_code != 200:
                report.failures.append((time.time(), "healthz", f"HTTP {response.status_code}"))
                continue
            report.note("healthz", took)
            report.health_worst_s = max(report.health_worst_s, took)


def run_load(srv: RunningServer, load: Load, duration_s: float) -> LoadReport:
    report = LoadReport()
    asyncio.run(_run(srv, load, duration_s, report))
    return report


class Background:
    """The load in a thread of its own, so a test can act (kill and restart the server on the
    same port) meanwhile. It runs for DURATION_S, or until ``stop``."""

    def __init__(self, srv: RunningServer, load: Load, duration_s: float) -> None:
        self.report = LoadReport()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(srv, load, duration_s), daemon=True)

    def _main(self, srv: RunningServer, load: Load, duration_s: float) -> None:
        try:
            asyncio.run(_run(srv, load, duration_s, self.report, self._stop))
        except BaseException as exc:  # surfaced by join()
            self._error = exc

    def __enter__(self) -> Background:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.join()

    def stop(self) -> None:
        """End the load now (it otherwise runs its full duration)."""
        self._stop.set()

    def join(self, timeout: float = 120) -> LoadReport:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the load did not stop"
        if self._error is not None:
            raise self._error
        return self.report
