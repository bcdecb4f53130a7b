"""arm_jobs: what the Azure ML facade (``api/arm/jobs.py``) adds to a job's create, and to its
create → Completed, beside the native route in one run.

Setup: a real cloudlet server (embedded SQLite, temp home) with a warm 2-node cluster
(``min_instances`` = ``max_instances`` = 2) and an environment version (``bench-env:1``, an
image: the nodes run it on their own Python) made through the native API. The same tiny job
(``true``) is submitted two ways over the same TLS listener, one keep-alive connection each:
  * ``arm``: ``PUT /subscriptions/…/providers/Microsoft.MachineLearningServices/workspaces/…/jobs/{name}
    ?api-version=…`` with a JWT from ``/msi/token``, in the body azure-ai-ml 1.35.2 sends
    (tests/data/arm_jobs/serverless.json, with a ``computeId`` and ``environmentId`` as ARM ids);
  * ``native``: ``PUT /api/v1/…/jobs/{name}`` with the API key, in the document the facade makes of
    that body (``api.arm.wire.arm_jobs.from_arm``), so both submit the same job.
Phases, each alternating the sides job by job (ABBA, so order and background bursts land on both):
  * sequential: one job at a time, each awaited before the next;
  * concurrent: SUBMITTERS threads, each submitting and awaiting its jobs in turn.
Per job: the PUT's duration (client), create → Completed = the server's recorded end
(``jobs.ended_at``, read from the SQLite file read-only as bench/dispatch.py does) minus the
client's clock just before the PUT, and (sequential) one GET of the finished job through its own
side's route, which must say Completed. The facade's cost is ``arm`` − ``native`` (goal ≤ 1 ms p50
per call). When the azure-ai-ml venv exists, a few real ``ml.jobs.create_or_update`` calls are
timed too (one ``PUT`` each on the wire; the rest is the SDK's own work).
"""

from __future__ import annotations

import json
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench import _results
from bench._dispatch_client import Api, Db
from bench._server import REPO_ROOT, ServerProcess, kill_node_processes, start_cloudlet
from bench._stats import ratio, summarize_ns
from bench.arm_facade import SDK_PYTHON, arm_token, run_sdk_script
from cloudlet.api.arm.wire import arm_jobs

NAME = "arm_jobs"
GOAL_MS = 1.0
CLUSTER = "bench-jobs"
ENV = ("bench-env", "1")
SUBMITTERS = 4
SIDES = ("arm", "native")
ARM_BODY = REPO_ROOT / "tests" / "data" / "arm_jobs" / "serverless.json"
API_VERSION = "2024-10-01"
ENDED = ("Completed", "Failed", "Canceled")
SDK_SCRIPT = """
import json, sys, time
from azure.ai.ml import MLClient, command
from azure.identity import DefaultAzureCredential
ml = MLClient.from_config(DefaultAzureCredential())
n, cluster, env = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def job(name):
    return command(name=name, command="true", environment=env, compute=cluster)
ml.jobs.create_or_update(job("sdk-warmup"))
out = []
for i in range(n):
    name = f"sdk-{i:04d}"
    t0 = time.time()
    t = time.perf_counter_ns()
    ml.jobs.create_or_update(job(name))
    out.append([name, t0, time.perf_counter_ns() - t])
    time.sleep(0.05)
print("RESULT " + json.dumps(out))
"""


def _plan(quick: bool) -> dict[str, int]:
    if quick:
        return {"warmup": 10, "sequential_pairs": 60, "concurrent_per_submitter": 20, "sdk_calls": 5}
    return {"warmup": 20, "sequential_pairs": 200, "concurrent_per_submitter": 50, "sdk_calls": 20}


class Sides:
    """The two ways to submit the same job, each on its own keep-alive HTTPS connection."""

    def __init__(self, server: ServerProcess, token: str, verify: ssl.SSLContext) -> None:
        self.server, self.token, self.verify = server, token, verify
        self.arm_ws = (
            f"/subscriptions/{server.subscription_id}/resourceGroups/default/providers/"
            "Microsoft.MachineLearningServices/workspaces/default"
        )
        body: dict[str, Any] = json.loads(ARM_BODY.read_text())
        body["properties"].update(
            command="true",
            computeId=f"{self.arm_ws}/computes/{CLUSTER}",
            environmentId=f"{self.arm_ws}/environments/{ENV[0]}/versions/{ENV[1]}",
        )
        self.arm_body = body
        self.native_doc = arm_jobs.from_arm(body, "x", arm_jobs.Refs(code=_no_code))

    def clients(self) -> dict[str, httpx.Client]:
        base = self.server.https_endpoint
        return {
            "arm": httpx.Client(
                base_url=base,
                headers={"Authorization": f"Bearer {self.token}"},
                verify=self.verify,
                timeout=30,
            ),
            "native": httpx.Client(
                base_url=base, headers=self.server.headers(), verify=self.verify, timeout=30
            ),
        }

    def put(self, side: str, client: httpx.Client, name: str) -> tuple[float, int]:
        """PUT the job; (client wall clock just before, duration in ns)."""
        if side == "arm":
            path, body = f"{self.arm_ws}/jobs/{name}?api-version={API_VERSION}", self.arm_body
        else:
            path, body = f"{self.server.ws_path}/jobs/{name}", {**self.native_doc, "name": name}
        t0 = time.time()
        start = time.perf_counter_ns()
        response = client.put(path, json=body)
        took = time.perf_counter_ns() - start
        if response.status_code != 201:
            raise RuntimeError(f"{side} PUT {name}: {response.status_code} {response.text[:400]}")
        return t0, took

    def get_status(self, side: str, client: httpx.Client, name: str) -> tuple[str, int]:
        """GET the job through SIDE's route; (its status, duration in ns)."""
        if side == "arm":
            path = f"{self.arm_ws}/jobs/{name}?api-version={API_VERSION}"
        else:
            path = f"{self.server.ws_path}/jobs/{name}"
        start = time.perf_counter_ns()
        response = client.get(path)
        took = time.perf_counter_ns() - start
        response.raise_for_status()
        body = response.json()
        return str(body["properties"]["status"] if side == "arm" else body["status"]), took


def _no_code(code_id: str) -> str:
    raise RuntimeError(f"the benchmark's job has no code ({code_id})")


def _order(i: int) -> tuple[str, str]:
    return SIDES if i % 2 == 0 else SIDES[::-1]  # ABBA: arm first, then native first, …


class Samples:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.put: dict[str, list[int]] = {side: [] for side in SIDES}
        self.get: dict[str, list[int]] = {side: [] for side in SIDES}
        self.t0: dict[str, tuple[str, float]] = {}  # job -> (side, client clock before the PUT)
        self.not_completed: list[str] = []

    def add(self, side: str, name: str, t0: float, put_ns: int) -> None:
        with self.lock:
            self.put[side].append(put_ns)
            self.t0[name] = (side, t0)


def _one(sides: Sides, db: Db, side: str, client: httpx.Client, name: str, out: Samples, get: bool) -> None:
    t0, took = sides.put(side, client, name)
    out.add(side, name, t0, took)
    status = db.wait_ended(name, 60, interval=0.002)
    if get:
        seen, get_ns = sides.get_status(side, client, name)
        out.get[side].append(get_ns)
        status = seen
    if status != "Completed":
        with out.lock:
            out.not_completed.append(f"{name}: {status}")


def _sequential(sides: Sides, db: Db, pairs: int, prefix: str, get: bool = True) -> Samples:
    clients = sides.clients()
    out = Samples()
    try:
        for i in range(pairs):
            for side in _order(i):
                _one(sides, db, side, clients[side], f"{prefix}{side}-{i:05d}", out, get)
    finally:
        for client in clients.values():
            client.close()
    return out


def _concurrent(sides: Sides, db: Db, per_submitter: int, prefix: str) -> tuple[Samples, float]:
    out = Samples()

    def submitter(k: int) -> None:
        clients = sides.clients()
        try:
            for i in range(per_submitter):
                side = _order(i // 2 + k)[i % 2]  # each submitter alternates, offset from the others
                _one(sides, db, side, clients[side], f"{prefix}{k}-{side}-{i:05d}", out, False)
        finally:
            for client in clients.values():
                client.close()

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=SUBMITTERS) as pool:
        list(pool.map(submitter, range(SUBMITTERS)))
    return out, time.perf_counter() - start


def _server_times(db: Db, out: Samples, prefix: str) -> dict[str, dict[str, list[int]]]:
    """Per side: create → Completed (server end − client start) and PUT → recorded (server's
    ``submitted_at`` − client start), in ns."""
    rows = db.job_times(prefix)
    series: dict[str, dict[str, list[int]]] = {s: {"e2e": [], "to_record": []} for s in SIDES}
    for name, (side, t0) in out.t0.items():
        row = rows.get(name) or {}
        if row.get("status") == "Completed" and row.get("ended_at"):
            series[side]["e2e"].append(int((row["ended_at"] - t0) * 1e9))
        if row.get("submitted_at"):
            series[side]["to_record"].append(int((row["submitted_at"] - t0) * 1e9))
    return series


def _phase(out: Samples, db: Db, prefix: str, wall_s: float | None = None) -> dict[str, Any]:
    times = _server_times(db, out, prefix)
    phase: dict[str, Any] = {"not_completed": out.not_completed[:10], "failed": len(out.not_completed)}
    for side in SIDES:
        phase[side] = {
            "put": summarize_ns(out.put[side]),
            "create_to_completed": summarize_ns(times[side]["e2e"]),
            "create_to_recorded": summarize_ns(times[side]["to_record"]),
        }
        if out.get[side]:
            phase[side]["get_completed"] = summarize_ns(out.get[side])
    arm, native = phase["arm"], phase["native"]
    for key in ("put", "create_to_completed", "get_completed"):
        if key in arm and key in native:
            phase[f"{key}_added_p50_ms"] = round(arm[key]["p50_ms"] - native[key]["p50_ms"], 4)
            phase[f"{key}_added_p99_ms"] = round(arm[key]["p99_ms"] - native[key]["p99_ms"], 4)
            phase[f"{key}_ratio_p50"] = ratio(arm[key]["p50_ms"], native[key]["p50_ms"])
            phase[f"{key}_ratio_p99"] = ratio(arm[key]["p99_ms"], native[key]["p99_ms"])
    if wall_s is not None:
        total = sum(len(v) for v in out.put.values())
        phase["wall_s"] = round(wall_s, 3)
        phase["jobs_per_s"] = round(total / wall_s, 1) if wall_s > 0 else None
    phase["loadavg_after"] = _results.loadavg()
    return phase


def _sdk(server: ServerProcess, db: Db, calls: int, tmp: Path) -> dict[str, Any] | None:
    if not SDK_PYTHON.exists():
        return None
    env_ref = f"azureml:{ENV[0]}:{ENV[1]}"
    rows: list[list[Any]] = run_sdk_script(server, tmp, SDK_SCRIPT, str(calls), CLUSTER, env_ref)
    for name, _, _ in rows:
        db.wait_ended(name, 60)
    ended = db.job_times("sdk-")
    e2e = [
        int((ended[name]["ended_at"] - t0) * 1e9)
        for name, t0, _ in rows
        if (ended.get(name) or {}).get("status") == "Completed"
    ]
    return {
        "create_or_update": summarize_ns([int(took) for _, _, took in rows]),
        "create_to_completed": summarize_ns(e2e),
        "completed": len(e2e),
    }


def _setup(server: ServerProcess) -> None:
    api = Api(server)
    try:
        created = api.create_cluster(CLUSTER, 2, 2, 600)
        if created.get("status") != "Succeeded":
            raise RuntimeError(f"the cluster's create operation: {created}")
        api.wait_idle_nodes(CLUSTER, 2)
        env = api.client.put(
            f"{server.ws_path}/environments/{ENV[0]}/versions/{ENV[1]}", json={"image": "python:3.11-slim"}
        )
        if env.status_code not in (200, 201):
            raise RuntimeError(f"PUT environment: {env.status_code} {env.text[:300]}")
    finally:
        api.close()


def _measure(plan: dict[str, int], server: ServerProcess, tmp: Path) -> dict[str, Any]:
    _setup(server)
    verify = ssl.create_default_context(cafile=server.ca_file)
    sides = Sides(server, arm_token(server), verify)
    db = Db(tmp / "home" / "cloudlet.db")
    out: dict[str, Any] = {"native_document": sides.native_doc, "arm_body": sides.arm_body}
    try:
        _sequential(sides, db, plan["warmup"], "warm-")  # discarded
        out["loadavg_before_sequential"] = _results.loadavg()
        print("   sequential ...", flush=True)
        out["sequential"] = _phase(_sequential(sides, db, plan["sequential_pairs"], "seq-"), db, "seq-")
        print(f"   concurrent ({SUBMITTERS} submitters) ...", flush=True)
        samples, wall = _concurrent(sides, db, plan["concurrent_per_submitter"], "con-")
        out["concurrent"] = _phase(samples, db, "con-", wall)
        print("   azure-ai-ml ml.jobs.create_or_update ...", flush=True)
        out["sdk"] = _sdk(server, db, plan["sdk_calls"], tmp)
    finally:
        db.close()
    return out


def run(quick: bool = False) -> dict[str, Any]:
    plan = _plan(quick)
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {**plan, "submitters": SUBMITTERS, "quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-arm-jobs-"))
    server = start_cloudlet(tmp / "home")
    try:
        data.update(_measure(plan, server, tmp))
        if server.process.poll() is not None:
            raise RuntimeError(f"the cloudlet server exited ({server.process.returncode}) mid-benchmark")
    finally:
        server.stop()
        kill_node_processes(tmp / "home")
        shutil.rmtree(tmp, ignore_errors=True)
    seq = data["sequential"]
    data["facade_added_put_p50_ms"] = seq["put_added_p50_ms"]
    added = (seq["put_added_p50_ms"], data["concurrent"]["put_added_p50_ms"])
    data["goal_met"] = all(value <= GOAL_MS for value in added)
    data["loadavg_end"] = _results.loadavg()
    return data


# -- report ---------------------------------------------------------------------------------------
_SERIES: dict[str, str] = {
    "put": "PUT job (the call)",
    "create_to_recorded": "PUT → job recorded (server clock)",
    "create_to_completed": "create → Completed",
    "get_completed": "GET the Completed job",
}


def _rows(phase: dict[str, Any], f: Callable[[Any, int], str]) -> list[str]:
    rows = []
    for key, label in _SERIES.items():
        for side, how in (("native", "native, API key"), ("arm", "ARM facade, JWT")):
            s = phase[side].get(key)
            if s:
                cells = " | ".join(f(s[k], 3) for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms"))
                rows.append(f"| {label} | {how} | {s['count']} | {cells} |")
        if f"{key}_added_p50_ms" in phase:
            rows.append(
                f"| {label} | **ARM − native** | | **{f(phase[f'{key}_added_p50_ms'], 3)}** | | "
                f"{f(phase[f'{key}_added_p99_ms'], 3)} | ratio p50 {f(phase[f'{key}_ratio_p50'], 3)} |"
            )
    return rows


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    machine, plan = data["machine"], data["plan"]
    quick = "; --quick" if plan["quick"] else ""
    head = "| series | side | n | p50 ms | p90 ms | p99 ms | mean ms |\n|---|---|---:|---:|---:|---:|---:|"
    con = data["concurrent"]
    rows = [
        f"## arm_jobs — {data['timestamp']}",
        "",
        f"Machine: {machine['nproc']} usable CPUs, Python {machine['python']}; load average "
        f"{data.get('loadavg_start')} at start, {data.get('loadavg_end')} at end; warm 2-node cluster, "
        f"`true` jobs, both sides over the same TLS listener, alternating job by job{quick}.",
        "",
        f"Sequential: {plan['sequential_pairs']} jobs per side, each awaited (load after: "
        f"{data['sequential']['loadavg_after']}).",
        "",
        head,
        *_rows(data["sequential"], f),
        "",
        f"Concurrent: {plan['submitters']} submitters × {plan['concurrent_per_submitter']} jobs, "
        f"{f(con.get('jobs_per_s'), 1)} jobs/s (load after: {con['loadavg_after']}).",
        "",
        head,
        *_rows(con, f),
    ]
    sdk = data.get("sdk")
    if sdk:
        c, e = sdk["create_or_update"], sdk["create_to_completed"]
        rows += [
            "",
            f"azure-ai-ml `ml.jobs.create_or_update` ({c['count']} calls, one PUT each): p50 "
            f"{f(c['p50_ms'], 2)} ms, p99 {f(c['p99_ms'], 2)} ms; create → Completed p50 "
            f"{f(e['p50_ms'], 2)} ms, p99 {f(e['p99_ms'], 2)} ms.",
        ]
    failed = data["sequential"]["failed"] + con["failed"]
    rows += [
        "",
        f"Facade adds {f(data['sequential']['put_added_p50_ms'], 3)} ms (sequential) and "
        f"{f(con['put_added_p50_ms'], 3)} ms (concurrent) at p50 per PUT; goal ≤ {GOAL_MS} ms p50: "
        f"{'met' if data['goal_met'] else 'NOT met'}. Jobs not Completed: {failed}.",
    ]
    return "\n".join(rows) + "\n"


def report(data: dict[str, Any]) -> str:
    seq, con = data["sequential"], data["concurrent"]
    verdict = "met" if data["goal_met"] else "NOT met"
    lines = [
        f"job PUT p50: native {seq['native']['put']['p50_ms']:.3f} ms, "
        f"ARM {seq['arm']['put']['p50_ms']:.3f} ms ({seq['put_added_p50_ms']:+.3f} ms; "
        f"concurrent {con['put_added_p50_ms']:+.3f} ms; "
        f"goal ≤ {GOAL_MS} ms: {verdict})",
        f"create → Completed p50: native {seq['native']['create_to_completed']['p50_ms']:.2f} ms, "
        f"ARM {seq['arm']['create_to_completed']['p50_ms']:.2f} ms",
    ]
    sdk = data.get("sdk")
    if sdk:
        lines.append(f"SDK ml.jobs.create_or_update p50 {sdk['create_or_update']['p50_ms']:.2f} ms")
    return "\n".join(lines)
