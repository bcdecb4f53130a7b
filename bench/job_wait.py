"""job_wait: ``job show`` and a ``job list`` page of queued jobs at 10,000 (and 100,000) queued jobs,
each with its reason, position and estimated start (issue 31 item 4).

Setup: a real cloudlet server (``bench/_server.py``, one worker so every request meets the same
per-process cache) with a 2-node cluster whose nodes run two long holders (``sleep``, timeout 2 h),
so every other job of it queues; then 500 completed jobs (the estimates' history) and the queued
jobs written straight into its SQLite store (10,000; the full run adds 90,000 more). The scheduler
sees a full cluster at its maximum and places none of them.

Series (HTTP, keep-alive, in the order a user meets them):
- ``show_running``: ``GET {ws}/jobs/{name}`` of a running holder (no ``waiting``): the view's cost
  without the queue, the baseline;
- ``show_head`` / ``show_mid`` (position 5,000) / ``show_deep`` (100,000 run: 50,000, "10,000+"):
  warm, the compute's queue snapshot cached (≤ 4 s old);
- ``show_cold``: the first show after the snapshot expired (one read of the queue's head: 10,000
  rows, the replay, the facts), each sample after a 4.2 s pause;
- ``list_page`` (warm) and ``list_cold``: ``GET {ws}/jobs?compute=…&status=Queued&$top=100``.
- ``snapshot_build`` (and ``deep_snapshot_build``): in-process, ``queue_snapshots.build`` on the
  server's store — the per-worker cold read itself (the queue's head, the running jobs, history,
  nodes, limits, the replay) without HTTP; each worker pays it once per compute per ``REFRESH_S``;
- in-process, the naive peer: the same page's 100 estimates made one by one with
  ``wait_estimate.estimate_start`` over the jobs ahead of each (what the snapshot's one replay
  replaces), pure compute, no store reads.

Run: ``python -m bench.job_wait [--quick] [--pg]`` (or ``python -m bench --only job_wait`` on
SQLite); ``--pg``: the store is a fresh database on the PostgreSQL at ``$CLOUDLET_BENCH_PG_URL`` (an
admin URL; default the local server), vacuumed and analysed after each fill (what autovacuum does
to a table that grew by 10,000s of rows), dropped at the end (``studio_jobs_page._postgres_database``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import create_engine, insert, select
from sqlalchemy.orm import Session

from bench import _results
from bench._server import REPO_ROOT, ServerProcess, kill_node_processes, start_cloudlet
from bench._stats import ratio, summarize_ns
from bench.studio_jobs_page import _postgres_database
from cloudlet.domain.jobs.wait_estimate import Ahead, RunningEnd, estimate_start
from cloudlet.services.jobs import queue_snapshots
from cloudlet.store.db import normalise_url, sqlite_url
from cloudlet.store.schema import Compute, Job, Workspace

NAME = "job_wait"
CLUSTER = "wait-bench"
QUEUED = 10_000
DEEP = 100_000
HISTORY = 500
REFRESH_PAUSE_S = 4.2  # past queue_snapshots.REFRESH_S: the next show reads the queue again


def _wait_operation(client: httpx.Client, url: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get(url).json().get("status") != "InProgress":
            return
        time.sleep(0.1)
    raise RuntimeError(f"operation {url} still running after {timeout} s")


def _wait_running(client: httpx.Client, ws: str, names: list[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(client.get(f"{ws}/jobs/{n}").json()["status"] == "Running" for n in names):
            return
        time.sleep(0.2)
    raise RuntimeError(f"holders {names} not running after {timeout} s")


def _setup_server(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=60) as client:
        ws = server.ws_path
        spec = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 2}
        created = client.put(f"{ws}/computes/{CLUSTER}", json={"name": CLUSTER, **spec})
        if created.status_code not in (200, 201):
            raise RuntimeError(f"PUT compute -> {created.status_code}: {created.text}")
        if created.headers.get("Operation-Location"):
            _wait_operation(client, created.headers["Operation-Location"])
        for i in range(2):
            body = {"command": "sleep 7200", "compute": f"azureml:{CLUSTER}", "limits": {"timeout": 7200}}
            answer = client.put(f"{ws}/jobs/holder-{i}", json=body)
            if answer.status_code != 201:
                raise RuntimeError(f"submit holder -> {answer.status_code}: {answer.text}")
        _wait_running(client, ws, ["holder-0", "holder-1"])


def _fill(url: str, start: int, count: int, history: int) -> float:
    """COUNT queued jobs (names q-START…) and HISTORY completed ones on the cluster in the store at
    URL; seconds taken (a PostgreSQL store's table vacuumed and analysed after)."""
    t0 = time.perf_counter()
    engine = create_engine(normalise_url(url))
    rnd = random.Random(31 + start)
    now = time.time()
    with engine.begin() as conn:
        ws_id = conn.execute(select(Workspace.id)).scalar_one()
        rows: list[dict[str, Any]] = []
        for i in range(history):
            started = now - 86_400 + i * 60
            rows.append(
                _row(
                    ws_id, f"done-{i:05d}", "Completed", started - 5, started, started + rnd.uniform(60, 1800)
                )
            )
        for i in range(start, start + count):
            rows.append(
                _row(ws_id, f"q-{i:06d}", "Queued", now + i * 1e-3, None, None, rnd.choice((600, 1800, 3600)))
            )
        for chunk in range(0, len(rows), 5000):
            conn.execute(insert(Job), rows[chunk : chunk + 5000])
    engine.dispose()
    if url.startswith("postgresql"):
        with psycopg.connect(url, autocommit=True) as pg:  # VACUUM runs outside a transaction
            pg.execute("VACUUM ANALYZE jobs")
    return time.perf_counter() - t0


def _builds(url: str, calls: int) -> dict[str, Any]:
    """``queue_snapshots.build`` of the cluster, in-process on the store at URL: the cold read."""
    engine = create_engine(normalise_url(url))
    samples = []
    try:
        with Session(engine) as session:
            compute = session.scalars(select(Compute).where(Compute.name == CLUSTER)).one()
            queue_snapshots.build(session, compute)  # the catalogue and the connection, warmed
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                queue_snapshots.build(session, compute)
                samples.append(time.perf_counter_ns() - t0)
                session.rollback()  # a fresh transaction each time, as each request has
    finally:
        engine.dispose()
    return summarize_ns(samples)


def _row(
    ws_id: int,
    name: str,
    status: str,
    submitted: float,
    started: float | None,
    ended: float | None,
    timeout: int = 3600,
) -> dict[str, Any]:
    return {
        "workspace_id": ws_id,
        "name": name,
        "compute_name": CLUSTER,
        "spec": {
            "type": "command",
            "command": "python train.py",
            "compute": f"azureml:{CLUSTER}",
            "limits": {"timeout": timeout},
        },
        "kind": "command",
        "status": status,
        "priority": 2,
        "instance_count": 1,
        "attempt": 0 if status == "Queued" else 1,
        "max_attempts": 3,
        "cancel_requested": False,
        "created_by": "bench@example.com",
        "submitted_at": submitted,
        "started_at": started,
        "ended_at": ended,
    }


def _time(call: Callable[[], httpx.Response], calls: int, pause: float = 0.0) -> dict[str, Any]:
    samples = []
    for _ in range(calls):
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter_ns()
        response = call()
        samples.append(time.perf_counter_ns() - t0)
        if response.status_code != 200:
            raise RuntimeError(f"{response.request.url} -> {response.status_code}: {response.text[:300]}")
    return summarize_ns(samples)


def _warm(client: httpx.Client, url: str, calls: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
    client.get(url, params=params)  # the snapshot, built
    return _time(lambda: client.get(url, params=params), calls)


def _naive_page(queue_len: int, page: int = 100) -> dict[str, Any]:
    """A list page's estimates made one by one (the newest 100 jobs: the deepest), in-process."""
    rnd = random.Random(5)
    ahead = [Ahead(1, rnd.choice((600.0, 1800.0, 3600.0))) for _ in range(queue_len)]
    running = [RunningEnd(1, 3000.0), RunningEnd(1, 5000.0)]
    samples = []
    for _ in range(3):
        t0 = time.perf_counter_ns()
        for position in range(queue_len - page, queue_len):
            estimate_start(1, 2, 0, running, ahead[:position])
        samples.append(time.perf_counter_ns() - t0)
    return summarize_ns(samples)


def run(quick: bool = False, pg: bool = False) -> dict[str, Any]:
    if pg:
        with _postgres_database() as url:
            return _run(quick, url)
    return _run(quick, None)


def _run(quick: bool, db_url: str | None) -> dict[str, Any]:
    calls = 20 if quick else 100
    cold_calls = 3 if quick else 8
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {
        "queued": QUEUED,
        "deep": None if quick else DEEP,
        "calls": calls,
        "cold_calls": cold_calls,
        "store": "postgresql" if db_url else "sqlite",
    }
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-wait-"))
    server: ServerProcess | None = None
    before = os.environ.get("CLOUDLET_WORKERS")
    os.environ["CLOUDLET_WORKERS"] = "1"  # one process: one cache, the cold and warm cases apart
    try:
        server = start_cloudlet(tmp / "home", db_url=db_url)
        store = db_url or sqlite_url(tmp / "home")
        _setup_server(server)
        data["fill_s"] = round(_fill(store, 1, QUEUED, HISTORY), 2)
        series: dict[str, Any] = {}
        samples: dict[str, Any] = {}
        with httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=60) as client:
            ws = server.ws_path
            page = {"compute": CLUSTER, "status": "Queued", "$top": 100}
            series["show_running"] = _warm(client, f"{ws}/jobs/holder-0", calls)
            series["show_head"] = _warm(client, f"{ws}/jobs/q-000001", calls)
            series["show_mid"] = _warm(client, f"{ws}/jobs/q-005000", calls)
            series["list_page"] = _warm(client, f"{ws}/jobs", calls, page)
            series["show_cold"] = _time(
                lambda: client.get(f"{ws}/jobs/q-005000"), cold_calls, REFRESH_PAUSE_S
            )
            series["list_cold"] = _time(
                lambda: client.get(f"{ws}/jobs", params=page), cold_calls, REFRESH_PAUSE_S
            )
            samples["mid"] = client.get(f"{ws}/jobs/q-005000").json().get("waiting")
            listed = client.get(f"{ws}/jobs", params=page).json()["value"]
            samples["list_first"] = listed[0].get("waiting") if listed else None
            series["snapshot_build"] = _builds(store, cold_calls)
            if not quick:
                data["fill_deep_s"] = round(_fill(store, QUEUED + 1, DEEP - QUEUED, 0), 2)
                series["deep_show_head"] = _warm(client, f"{ws}/jobs/q-000001", calls)
                series["deep_show_deep"] = _warm(client, f"{ws}/jobs/q-050000", calls)
                series["deep_list_page"] = _warm(client, f"{ws}/jobs", calls, page)
                series["deep_show_cold"] = _time(
                    lambda: client.get(f"{ws}/jobs/q-050000"), cold_calls, REFRESH_PAUSE_S
                )
                series["deep_list_cold"] = _time(
                    lambda: client.get(f"{ws}/jobs", params=page), cold_calls, REFRESH_PAUSE_S
                )
                samples["deep"] = client.get(f"{ws}/jobs/q-050000").json().get("waiting")
                series["deep_snapshot_build"] = _builds(store, cold_calls)
        series["naive_page_estimates"] = _naive_page(QUEUED)
        data.update(
            {
                "series": series,
                "samples": samples,
                "ratios": {
                    "show_head_over_running_p50": ratio(
                        series["show_head"]["p50_ms"], series["show_running"]["p50_ms"]
                    ),
                    "naive_page_over_list_page_p50": ratio(
                        series["naive_page_estimates"]["p50_ms"], series["list_page"]["p50_ms"]
                    ),
                },
                "loadavg_end": _results.loadavg(),
            }
        )
        return data
    finally:
        if before is None:
            os.environ.pop("CLOUDLET_WORKERS", None)
        else:
            os.environ["CLOUDLET_WORKERS"] = before
        if server is not None:
            server.stop()
        kill_node_processes(tmp / "home")
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(data: dict[str, Any]) -> str:
    series = data["series"]
    lines = [
        f"## job_wait — queued jobs' reason, position and ETA at {data['plan']['queued']:,} queued "
        f"on {data['plan'].get('store', 'sqlite')} ({data['timestamp']})",
        "",
        "HTTP on one worker; warm = the compute's queue snapshot cached (≤ 4 s old), cold = the first "
        "request after it expired (reads the queue's head once). `naive_page_estimates`: a page's 100 "
        "estimates made one by one in-process (what one replay per snapshot replaces).",
        "",
        "| series | p50 ms | p90 ms | max ms |",
        "|---|---:|---:|---:|",
    ]
    for key, stats in series.items():
        lines.append(f"| {key} | {stats['p50_ms']:.2f} | {stats['p90_ms']:.2f} | {stats['max_ms']:.2f} |")
    mid = data["samples"].get("mid") or {}
    deep = data["samples"].get("deep") or {}
    lines += [
        "",
        f"Position 5,000 shows: `{mid.get('position_text')}`, {mid.get('eta_text')}, `{mid.get('code')}`."
        + (
            f" Position 50,000 of 100,000: `{deep.get('position_text')}`, ETA {deep.get('eta')}."
            if deep
            else ""
        ),
    ]
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    s = data["series"]
    text = (
        f"show warm p50 {s['show_mid']['p50_ms']:.1f} ms (running job {s['show_running']['p50_ms']:.1f}), "
        f"cold p50 {s['show_cold']['p50_ms']:.1f} ms; list page warm {s['list_page']['p50_ms']:.1f} ms, "
        f"cold {s['list_cold']['p50_ms']:.1f} ms; "
        f"naive page estimates {s['naive_page_estimates']['p50_ms']:.0f} ms; "
        f"snapshot build (in-process) p50 {s['snapshot_build']['p50_ms']:.1f} ms"
    )
    if "deep_show_cold" in s:
        text += (
            f"; at {DEEP:,}: show warm {s['deep_show_deep']['p50_ms']:.1f} ms, cold "
            f"{s['deep_show_cold']['p50_ms']:.1f} ms, list cold {s['deep_list_cold']['p50_ms']:.1f} ms, "
            f"snapshot build {s['deep_snapshot_build']['p50_ms']:.1f} ms"
        )
    return text


if __name__ == "__main__":
    found = run(quick="--quick" in sys.argv, pg="--pg" in sys.argv)
    print(markdown(found))
    print(report(found))
    print(json.dumps({"store": found["plan"]["store"], "loadavg_end": found["loadavg_end"]}))
