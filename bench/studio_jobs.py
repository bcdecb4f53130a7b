"""studio_jobs: the studio's job list over 100,000 jobs, beside MLflow's ``search_runs``.

Setup: an embedded SQLite store (``server.open_store``, migrated to head) filled with 100,000 jobs
written through the store layer in one transaction: a realistic mix of statuses, kinds (pipelines
and sweeps with children), 20 computes, 50 submitters, 30 experiments, two tags a job, 90 days of
submissions. The peer is MLflow's own SQLAlchemy tracking store (``SqlAlchemyStore``, SQLite) with
100,000 runs in one experiment, the same statuses, users, run names and tags, bulk-inserted into
its tables after MLflow made its schema.

Series: ``services.jobs.job_search.search_jobs`` in-process (the service call the studio's page makes,
with its list columns rendered), per query, ``calls`` times each after a warm-up → p50/p95; and
``SqlAlchemyStore.search_runs`` for the equivalent query (first page, status filter, user,
tag, name substring) → the ratio cloudlet / MLflow. The query plans (EXPLAIN QUERY PLAN) are
recorded: the indexed pages must not sort the workspace's jobs.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select, text

from bench import _results
from bench._server import REPO_ROOT
from bench._stats import ratio, summarize_ns
from cloudlet.server import open_store
from cloudlet.services.jobs import job_search
from cloudlet.services.jobs.job_search import JobQuery
from cloudlet.store.schema import Job, Workspace

NAME = "studio_jobs"
JOBS = 100_000
GOAL_FIRST_MS = 150.0
GOAL_FILTERED_MS = 300.0
STATUSES = [
    ("Completed", 70),
    ("Failed", 10),
    ("Canceled", 5),
    ("Running", 5),
    ("Queued", 8),
    ("Preparing", 2),
]
MLFLOW_STATUS = {
    "Completed": "FINISHED",
    "Failed": "FAILED",
    "Canceled": "KILLED",
    "Running": "RUNNING",
    "Queued": "SCHEDULED",
    "Preparing": "SCHEDULED",
}
TEAMS = ["vision", "speech", "nlp", "ranking", "infra", "research"]
DAY = 86_400.0

# (key, cloudlet query, MLflow filter string, MLflow order_by, is the first page)
QUERIES: list[tuple[str, JobQuery, str, list[str]]] = [
    ("first_page", JobQuery(), "", ["attributes.start_time DESC"]),
    ("status_failed", JobQuery(statuses=("Failed",)), "attributes.status = 'FAILED'", []),
    ("compute", JobQuery(computes=("c07",)), "tags.compute = 'c07'", []),
    (
        "submitted_by",
        JobQuery(created_by=("user07@example.com",)),
        "attributes.user_id = 'user07@example.com'",
        [],
    ),
    ("tag_team", JobQuery(tags=("team=speech",)), "tags.team = 'speech'", []),
    ("name_search", JobQuery(text="ab1"), "attributes.run_name LIKE '%ab1%'", []),
    ("experiment", JobQuery(experiment="exp-07"), "tags.experiment = 'exp-07'", []),
    ("status_and_compute", JobQuery(statuses=("Running", "Queued"), computes=("c03",)), "", []),
    ("last_week", JobQuery(submitted_from=0.0), "", []),  # from filled in with the store's clock
    ("sort_name", JobQuery(sort="name", descending=False), "", ["attributes.run_name ASC"]),
    ("sort_duration", JobQuery(sort="duration"), "", []),
    ("sort_status", JobQuery(sort="status"), "", []),
    ("with_children", JobQuery(include_children=True), "", []),
    ("failed_with_count", JobQuery(statuses=("Failed",), count=True), "", []),
    ("first_page_with_count", JobQuery(count=True), "", []),
]


def _fill(session: Any, ws_id: int, now: float, rnd: random.Random) -> list[dict[str, Any]]:
    statuses = [s for s, weight in STATUSES for _ in range(weight)]
    rows: list[dict[str, Any]] = []
    start = now - 90 * DAY
    for i in range(JOBS):
        status = rnd.choice(statuses)
        submitted = start + i * (90 * DAY / JOBS) + rnd.random()
        started = submitted + rnd.uniform(1, 600) if status not in ("Queued", "Preparing") else None
        ended = started + rnd.uniform(10, 7200) if started and status not in ("Running",) else None
        kind = "pipeline" if i % 14 == 0 else ("sweep" if i % 33 == 0 else "command")
        compute = f"c{rnd.randrange(20):02d}"
        spec = {
            "type": kind,
            "command": "python train.py",
            "display_name": f"train {uuid.UUID(int=rnd.getrandbits(128)).hex[:8]}",
            "experiment_name": f"exp-{rnd.randrange(30):02d}",
            "tags": {"team": rnd.choice(TEAMS), "project": f"p{rnd.randrange(50)}"},
            "compute": f"azureml:{compute}",
        }
        rows.append(
            {
                "workspace_id": ws_id,
                "name": f"job-{i:06d}-{spec['display_name'][6:]}",
                "compute_name": compute,
                "spec": spec,
                "kind": kind,
                "status": status,
                "priority": 2,
                "instance_count": 1,
                "attempt": 0 if status == "Queued" else 1,
                "max_attempts": 3,
                "cancel_requested": False,
                "created_by": f"user{rnd.randrange(50):02d}@example.com",
                "submitted_at": submitted,
                "started_at": started,
                "ended_at": ended,
            }
        )
    session.execute(insert(Job), rows)
    # Every tenth job becomes a child of the pipeline or sweep before it (steps and trials).
    session.execute(
        text(
            "UPDATE jobs SET parent_job_id = (SELECT MAX(p.id) FROM jobs p WHERE p.id < jobs.id "
            "AND p.kind != 'command'), child_key = 'step' || jobs.id "
            "WHERE jobs.id % 10 = 3 AND jobs.kind = 'command'"
        )
    )
    return rows


def _mlflow_peer(tmp: Path, rows: list[dict[str, Any]]) -> tuple[Any, str]:
    """MLflow's SQLAlchemy tracking store with one run per job (same status, user, name, tags)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore(f"sqlite:///{tmp / 'mlflow.db'}", str(tmp / "mlartifacts"))
    experiment_id = store.create_experiment("studio-bench")
    runs, tags = [], []
    for row in rows:
        run_id = uuid.uuid4().hex
        runs.append(
            {
                "run_uuid": run_id,
                "name": row["name"],
                "source_type": "LOCAL",
                "source_name": "",
                "entry_point_name": "",
                "user_id": row["created_by"],
                "status": MLFLOW_STATUS[row["status"]],
                "start_time": int(row["submitted_at"] * 1000),
                "end_time": int(row["ended_at"] * 1000) if row["ended_at"] else None,
                "source_version": "",
                "lifecycle_stage": "active",
                "artifact_uri": f"{tmp}/mlartifacts/{run_id}",
                "experiment_id": int(experiment_id),
            }
        )
        spec = row["spec"]
        for key, value in (
            ("mlflow.runName", row["name"]),
            ("mlflow.user", row["created_by"]),
            ("team", spec["tags"]["team"]),
            ("project", spec["tags"]["project"]),
            ("compute", row["compute_name"]),
            ("experiment", spec["experiment_name"]),
        ):
            tags.append({"key": key, "value": value, "run_uuid": run_id})
    with store.engine.begin() as conn:
        conn.execute(text(_insert_sql("runs", runs[0])), runs)
        conn.execute(text(_insert_sql("tags", tags[0])), tags)
    return store, experiment_id


def _insert_sql(table: str, row: dict[str, Any]) -> str:
    return f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"


def _time(call: Callable[[], object], calls: int) -> dict[str, Any]:
    for _ in range(max(3, calls // 20)):  # warm-up: statement caches, page cache
        call()
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    stats = summarize_ns(samples)
    stats["p95_ms"] = round(sorted(samples)[int(0.95 * (len(samples) - 1))] / 1e6, 4)
    return stats


def _plan(session: Any, statement: Any) -> list[str]:
    compiled = statement.compile(session.get_bind(), compile_kwargs={"literal_binds": True})
    return [str(row[-1]) for row in session.execute(text(f"EXPLAIN QUERY PLAN {compiled}"))]


def run(quick: bool = False) -> dict[str, Any]:
    calls = 40 if quick else 200
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {"jobs": JOBS, "calls": calls, "quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-studio-"))
    try:
        t0 = time.perf_counter()
        (tmp / "home").mkdir()
        store = open_store(tmp / "home", None)
        now = time.time()
        with store.control.begin() as session:
            ws = session.scalars(select(Workspace)).one()
            rows = _fill(session, ws.id, now, random.Random(27))
        data["setup_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        peer, experiment_id = _mlflow_peer(tmp, rows)
        data["peer_setup_s"] = round(time.perf_counter() - t0, 2)
        del rows
        series: dict[str, Any] = {}
        plans: dict[str, list[str]] = {}
        with store.read_sessions() as session:
            ws = session.scalars(select(Workspace)).one()
            for key, query, mlflow_filter, mlflow_order in QUERIES:
                if key == "last_week":
                    query = JobQuery(submitted_from=now - 7 * DAY)

                def ours(q: JobQuery = query) -> object:
                    page = job_search.search_jobs(session, ws, q)
                    return [job_search.list_columns(row) for row in page.jobs]

                series[f"cloudlet.{key}"] = _time(ours, calls)
                plans[key] = _plan(session, job_search.page_statement(session, ws, query))
                if mlflow_filter or mlflow_order:

                    def theirs(f: str = mlflow_filter, o: list[str] = mlflow_order) -> object:
                        return peer.search_runs([experiment_id], f, 1, max_results=100, order_by=o or None)

                    series[f"mlflow.{key}"] = _time(theirs, max(20, calls // 4))
            # Paging deep: ten pages on from the first, each from the previous token.
            token = None
            for _ in range(10):
                token = job_search.search_jobs(session, ws, JobQuery(after=token)).next_token
            series["cloudlet.page_11"] = _time(
                lambda: job_search.search_jobs(session, ws, JobQuery(after=token)), calls
            )
        ratios = {
            key.removeprefix("mlflow."): ratio(
                series[f"cloudlet.{key.removeprefix('mlflow.')}"]["p50_ms"], value["p50_ms"]
            )
            for key, value in series.items()
            if key.startswith("mlflow.")
        }
        first = series["cloudlet.first_page"]["p95_ms"]
        filtered = max(
            v["p95_ms"] for k, v in series.items() if k.startswith("cloudlet.") and "first" not in k
        )
        data.update(
            {
                "series": series,
                "ratios_p50_cloudlet_over_mlflow": ratios,
                "query_plans": plans,
                "goal": {
                    "first_page_p95_ms": first,
                    "first_page_holds": first <= GOAL_FIRST_MS,
                    "worst_filtered_p95_ms": filtered,
                    "filtered_holds": filtered <= GOAL_FILTERED_MS,
                },
                "loadavg_end": _results.loadavg(),
            }
        )
        return data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(data: dict[str, Any]) -> str:
    series, ratios, goal = data["series"], data["ratios_p50_cloudlet_over_mlflow"], data["goal"]
    lines = [
        f"## studio_jobs — the job list over {data['plan']['jobs']:,} jobs ({data['timestamp']})",
        "",
        f"`job_search.search_jobs` in-process on embedded SQLite, {data['plan']['calls']} calls a query; "
        f"MLflow `SqlAlchemyStore.search_runs` (SQLite, same runs) beside it. Setup {data['setup_s']} s "
        f"(MLflow's {data['peer_setup_s']} s).",
        "",
        "| query | cloudlet p50 ms | p95 ms | MLflow p50 ms | ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, stats in series.items():
        if not key.startswith("cloudlet."):
            continue
        name = key.removeprefix("cloudlet.")
        peer = series.get(f"mlflow.{name}")
        peer_p50 = f"{peer['p50_ms']:.2f}" if peer else "—"
        ours = f"{stats['p50_ms']:.2f} | {stats['p95_ms']:.2f}"
        lines.append(f"| {name} | {ours} | {peer_p50} | {ratios.get(name, '—')} |")
    lines += [
        "",
        f"Goal: first page ≤ {GOAL_FIRST_MS:g} ms p95 ({goal['first_page_p95_ms']:.2f}: "
        f"{'holds' if goal['first_page_holds'] else 'does NOT hold'}); filtered ≤ {GOAL_FILTERED_MS:g} ms "
        f"p95 (worst {goal['worst_filtered_p95_ms']:.2f}: "
        f"{'holds' if goal['filtered_holds'] else 'does NOT hold'}).",
    ]
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    goal = data["goal"]
    return (
        f"first page p95 {goal['first_page_p95_ms']:.2f} ms, worst filtered p95 "
        f"{goal['worst_filtered_p95_ms']:.2f} ms, ratios vs MLflow {data['ratios_p50_cloudlet_over_mlflow']}"
    )
