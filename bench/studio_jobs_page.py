"""studio_jobs_page: the studio's Jobs page over 100,000 jobs, through the studio route.

Setup: ``bench.studio_jobs``'s store of 100,000 jobs (its data builder), then a real server on that
home, signed in through the studio's form. Series: ``GET …/jobs`` (the whole page in the shell)
and the htmx results part, for the first page and filtered pages, ``calls`` times each after a
warm-up, timed at the client on loopback (what the server took, plus a loopback round trip) →
p50/p95. Run: ``python -m bench.studio_jobs_page [--quick] [--pg]``; ``--pg``: the store is a fresh
database on the PostgreSQL at ``$CLOUDLET_BENCH_PG_URL`` (an admin URL; default the local server,
``postgresql://postgres@127.0.0.1:5432/postgres``), vacuumed and analysed after the fill (what
autovacuum does to a table that grew by 100,000 rows), dropped at the end.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import select

from bench._server import start_cloudlet
from bench._stats import summarize_ns
from bench.studio_jobs import GOAL_FILTERED_MS, GOAL_FIRST_MS, _fill
from cloudlet.server import open_store
from cloudlet.store.schema import Workspace

PAGES: dict[str, dict[str, str]] = {
    "first_page": {},
    "status_failed": {"status": "Failed"},
    "compute": {"compute": "c07"},
    "submitted_by": {"by": "user07@example.com"},
    "tag_team": {"tag": "team=speech"},
    "name_search": {"q": "ab1"},
    "name_search_common": {"q": "train"},
    "experiment": {"experiment": "exp-07"},
    "last_7_days": {"since": "7d"},
    "sort_name": {"sort": "name", "order": "asc"},
    "status_and_sort_duration": {"status": "Completed", "sort": "duration"},
}


def _p95(
    client: httpx.Client, url: str, params: dict[str, str], headers: dict[str, str], calls: int
) -> dict[str, Any]:
    for _ in range(3):  # warm-up
        assert client.get(url, params=params, headers=headers).status_code == 200
    took: list[int] = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        answer = client.get(url, params=params, headers=headers)
        took.append(time.perf_counter_ns() - t0)
        assert answer.status_code == 200, answer.text[:300]
    summary = summarize_ns(took)
    ordered = sorted(took)
    summary["p95_ms"] = round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] / 1e6, 2)
    return summary


@contextmanager
def _postgres_database() -> Iterator[str]:
    admin = os.environ.get("CLOUDLET_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"cloudlet_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{admin.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(quick: bool = False, pg: bool = False) -> dict[str, Any]:
    if pg:
        with _postgres_database() as url:
            return _run(quick, url)
    return _run(quick, None)


def _run(quick: bool, db_url: str | None) -> dict[str, Any]:
    calls = 20 if quick else 50
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-studio-page-"))
    server = None
    try:
        home = tmp / "home"
        home.mkdir()
        store = open_store(home, db_url)
        with store.control.begin() as session:
            ws = session.scalars(select(Workspace)).one()
            _fill(session, ws.id, time.time(), random.Random(27))
        if db_url:
            with psycopg.connect(db_url, autocommit=True) as conn:  # VACUUM runs outside a transaction
                conn.execute("VACUUM ANALYZE jobs")
        server = start_cloudlet(home, db_url=db_url)
        base = f"/studio/ws/{server.subscription_id}/default/default/jobs"
        series: dict[str, Any] = {}
        with httpx.Client(base_url=server.endpoint, timeout=60) as client:
            signed = client.post("/studio/signin", data={"api_key": server.api_key, "next": "/studio/"})
            assert signed.status_code == 303, signed.text
            part = {"HX-Request": "true", "HX-Target": "jobs-results"}
            for key, params in PAGES.items():
                series[f"page.{key}"] = _p95(client, base, params, {}, calls)
                series[f"results.{key}"] = _p95(client, base, params, part, calls)
        first = series["page.first_page"]["p95_ms"]
        filtered = max(v["p95_ms"] for k, v in series.items() if k.startswith("page.") and "first" not in k)
        return {
            "store": "postgresql" if db_url else "sqlite",
            "loadavg": os.getloadavg(),
            "calls": calls,
            "series": series,
            "goal": {
                "first_page_p95_ms": first,
                "first_page_holds": first <= GOAL_FIRST_MS,
                "worst_filtered_p95_ms": filtered,
                "filtered_holds": filtered <= GOAL_FILTERED_MS,
            },
        }
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    data = run(quick="--quick" in sys.argv, pg="--pg" in sys.argv)
    for name, summary in data["series"].items():
        print(f"{name:40s} p50 {summary['p50_ms']:8.1f} ms   p95 {summary['p95_ms']:8.1f} ms")
    print(json.dumps({"store": data["store"], "loadavg": data["loadavg"], **data["goal"]}))
