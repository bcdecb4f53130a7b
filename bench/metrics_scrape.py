"""metrics_scrape: ``GET /metrics`` on a real server holding 10,000 jobs and 100 nodes (issue 29).

Setup: a fresh home's embedded SQLite store (``server.open_store``, migrated) filled through the store
layer: 20 clusters of 5 nodes each (100 nodes, busy, heartbeats in the future so that no loop
declares them lost during the run, and each cluster at its max so that none grows), 10,000 jobs over
those computes (the studio benchmark's mix of statuses: 800 queued), 200 finished operations. Then
``cloudlet server`` is started on that home with a scrape token, with 1 worker and with
``--workers 2`` (every scrape then also sums both workers' multiprocess files).

Series, per server: ``calls`` sequential scrapes over one keep-alive connection after a warm-up
→ p50/p95 client-side; the peer is the same server's ``/healthz`` (the floor of a request) in the
same run. The goal (issue 29): p95 ≤ 100 ms. Also the store families' queries alone, in-process.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import insert, select

from bench import _results
from bench._server import REPO_ROOT, start_cloudlet
from bench._stats import ratio, summarize_ns
from cloudlet.server import open_store
from cloudlet.services.core import metrics
from cloudlet.store.schema import Compute, Job, Node, Operation, Workspace

NAME = "metrics_scrape"
JOBS = 10_000
COMPUTES = 20
NODES_EACH = 5
OPERATIONS = 200
GOAL_P95_MS = 100.0
TOKEN = "bench-scrape-token"
STATUSES = [
    ("Completed", 70),
    ("Failed", 10),
    ("Canceled", 5),
    ("Running", 5),
    ("Queued", 8),
    ("Preparing", 2),
]


def _fill(session: Any, ws_id: int, now: float, rnd: random.Random) -> dict[str, int]:
    stamp = datetime.now(UTC)
    spec = {
        "type": "amlcompute",
        "size": "Standard_DS3_v2",
        "min_instances": 0,
        "max_instances": NODES_EACH,
        "idle_time_before_scale_down": 86_400,
    }
    session.execute(
        insert(Compute),
        [
            {
                "workspace_id": ws_id,
                "name": f"c{i:02d}",
                "type": "amlcompute",
                "location": "local",
                "size": "Standard_DS3_v2",
                "spec": {**spec, "name": f"c{i:02d}"},
                "created_by": "bench",
                "provisioning_state": "Succeeded",
                "state": "Running",
                "current_node_count": NODES_EACH,
                "created_on": stamp,
                "last_modified_on": stamp,
            }
            for i in range(COMPUTES)
        ],
    )
    compute_ids = list(session.scalars(select(Compute.id).order_by(Compute.id)))
    session.execute(
        insert(Node),
        [
            {
                "id": uuid.UUID(int=rnd.getrandbits(128)).hex[:24],
                "workspace_id": ws_id,
                "owner_type": "computes",
                "owner_id": compute_id,
                "installation_id": "bench",
                "location": "local",
                "provider": "local",
                "size": "Standard_DS3_v2",
                "family": "standardDSv2Family",
                "vcpus": 4,
                "memory_gb": 14.0,
                "tier": "dedicated",
                "state": "busy",
                "state_since": now,
                "token_hash": uuid.UUID(int=rnd.getrandbits(128)).hex,
                "created_at": now,
                "registered_at": now,
                "last_heartbeat": now + 86_400,  # never lost while the benchmark runs
            }
            for compute_id in compute_ids
            for _ in range(NODES_EACH)
        ],
    )
    statuses = [s for s, weight in STATUSES for _ in range(weight)]
    jobs = []
    for i in range(JOBS):
        status = rnd.choice(statuses)
        submitted = now - 86_400 + i * 8.0
        compute = f"c{rnd.randrange(COMPUTES):02d}"
        jobs.append(
            {
                "workspace_id": ws_id,
                "name": f"job-{i:05d}",
                "compute_name": compute,
                "spec": {"type": "command", "command": "python train.py", "compute": f"azureml:{compute}"},
                "status": status,
                "created_by": f"user{rnd.randrange(50):02d}@example.com",
                "submitted_at": submitted,
                "started_at": None if status in ("Queued", "Preparing") else submitted + 60,
                "ended_at": submitted + 600 if status in ("Completed", "Failed", "Canceled") else None,
            }
        )
    session.execute(insert(Job), jobs)
    session.execute(
        insert(Operation),
        [
            {
                "id": str(uuid.UUID(int=rnd.getrandbits(128))),
                "workspace_id": ws_id,
                "resource_type": "computes",
                "resource_id": compute_ids[i % COMPUTES],
                "resource_name": f"c{i % COMPUTES:02d}",
                "kind": "create",
                "status": "Succeeded",
                "step": "done",
                "created_by": "bench",
                "created_on": stamp,
                "ended_on": stamp,
            }
            for i in range(OPERATIONS)
        ],
    )
    return {"computes": COMPUTES, "nodes": COMPUTES * NODES_EACH, "jobs": JOBS, "operations": OPERATIONS}


def _time(http: httpx.Client, path: str, headers: dict[str, str], calls: int) -> dict[str, Any]:
    for _ in range(5):
        assert http.get(path, headers=headers).status_code == 200
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        answer = http.get(path, headers=headers)
        samples.append(time.perf_counter_ns() - t0)
        assert answer.status_code == 200, answer.text
    stats = summarize_ns(samples)
    stats["p95_ms"] = round(sorted(samples)[int(0.95 * (len(samples) - 1))] / 1e6, 4)
    return stats


def _scrape_series(home: Path, workers: int, calls: int) -> dict[str, Any]:
    saved = {k: os.environ.get(k) for k in (metrics.TOKEN_ENV, "CLOUDLET_WORKERS")}
    os.environ[metrics.TOKEN_ENV] = TOKEN
    os.environ["CLOUDLET_WORKERS"] = str(workers)
    try:
        server = start_cloudlet(home, timeout=120)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        with httpx.Client(base_url=server.endpoint, timeout=30, trust_env=False) as http:
            auth = {"Authorization": f"Bearer {TOKEN}"}
            body = http.get("/metrics", headers=auth).text
            scrape = _time(http, "/metrics", auth, calls)
            health = _time(http, "/healthz", {}, calls)
        return {
            "scrape": scrape,
            "healthz": health,
            "bytes": len(body),
            "lines": body.count("\n"),
            "queued_seen": sum(
                float(line.rsplit(" ", 1)[1])
                for line in body.splitlines()
                if line.startswith("cloudlet_queue_depth{")
            ),
        }
    finally:
        server.stop()


def run(quick: bool = False) -> dict[str, Any]:
    calls = 50 if quick else 300
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {"jobs": JOBS, "nodes": COMPUTES * NODES_EACH, "calls": calls, "quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-metrics-"))
    try:
        home = tmp / "home"
        home.mkdir()
        store = open_store(home, None)
        t0 = time.perf_counter()
        with store.control.begin() as session:
            ws = session.scalars(select(Workspace)).one()
            data["setup"] = _fill(session, ws.id, time.time(), random.Random(29))
        data["setup_s"] = round(time.perf_counter() - t0, 2)
        samples = []
        with store.read_sessions() as session:
            for _ in range(calls):
                t0 = time.perf_counter_ns()
                metrics.store_families(session, time.time())
                samples.append(time.perf_counter_ns() - t0)
        in_process = summarize_ns(samples)
        for sessions in (store.sessions, store.control):
            sessions.kw["bind"].dispose()
        series = {"store_families_in_process": in_process}
        for workers in (1, 2):
            series[f"workers_{workers}"] = _scrape_series(home, workers, calls)
        worst = max(series[f"workers_{w}"]["scrape"]["p95_ms"] for w in (1, 2))
        data.update(
            {
                "series": series,
                "ratio_scrape_over_healthz_p50": {
                    f"workers_{w}": ratio(
                        series[f"workers_{w}"]["scrape"]["p50_ms"],
                        series[f"workers_{w}"]["healthz"]["p50_ms"],
                    )
                    for w in (1, 2)
                },
                "goal": {"worst_p95_ms": worst, "bound_ms": GOAL_P95_MS, "holds": worst <= GOAL_P95_MS},
                "loadavg_end": _results.loadavg(),
            }
        )
        return data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(data: dict[str, Any]) -> str:
    series, goal = data["series"], data["goal"]
    lines = [
        f"## metrics_scrape — `GET /metrics` over {data['plan']['jobs']:,} jobs and "
        f"{data['plan']['nodes']} nodes ({data['timestamp']})",
        "",
        f"{data['plan']['calls']} sequential scrapes per server, one keep-alive connection; the "
        "same server's `/healthz` beside it.",
        "",
        "| server | scrape p50 ms | scrape p95 ms | /healthz p50 ms | ratio p50 | answer |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for workers in (1, 2):
        one = series[f"workers_{workers}"]
        lines.append(
            f"| {workers} worker{'s' if workers > 1 else ''} | {one['scrape']['p50_ms']:.2f} | "
            f"{one['scrape']['p95_ms']:.2f} | {one['healthz']['p50_ms']:.2f} | "
            f"{data['ratio_scrape_over_healthz_p50'][f'workers_{workers}']} | "
            f"{one['bytes']:,} B, {one['lines']} lines |"
        )
    inner = series["store_families_in_process"]
    lines += [
        "",
        f"The store's queries alone (in-process): p50 {inner['p50_ms']:.2f} ms, "
        f"p90 {inner['p90_ms']:.2f} ms.",
        f"Goal: p95 ≤ {goal['bound_ms']:g} ms (worst {goal['worst_p95_ms']:.2f}: "
        f"{'holds' if goal['holds'] else 'does NOT hold'}).",
    ]
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    goal = data["goal"]
    return f"scrape p95 worst {goal['worst_p95_ms']:.2f} ms (bound {goal['bound_ms']:g} ms)"
