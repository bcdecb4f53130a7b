"""dispatch: how fast cloudlet puts a command job's process on a node, against peers in the same run.

Setup: a real cloudlet server (embedded SQLite, temp home, ``bench/_server.py``) whose local
provider starts real node agents (``python -m cloudlet.agent``). Measured, in this order:

1. peer ``subprocess``: the physical floor on this machine — spawn ``date +%s.%N`` (and
   ``bash -c 'date +%s.%N'``, which is what an agent runs) one at a time, spawn -> start from the
   printed timestamp; and N ``bash -c true`` processes with 2 workers (a 2-node cluster's
   parallelism) -> processes/s;
2. cloudlet, on a warm 2-node cluster (``min_instances`` = ``max_instances`` = 2):
   * warm dispatch latency: tiny jobs (``date +%s.%N``) one at a time; latency = the timestamp the
     process printed (read back with ``GET {ws}/jobs/{name}/logs``) minus the client's wall time just
     before the ``PUT``; broken down with the server's own records (``jobs.submitted_at``,
     ``job_runs.assigned_at``, read from the SQLite file, read-only);
   * agent RSS idle and busy;
   * throughput: N ``true`` jobs submitted as fast as possible (8 client threads), end to end until
     every one is Completed -> jobs/s;
   * server RSS (and idle CPU) with ~1,000 queued jobs behind a ``sleep 60`` job on a 1-node cluster,
     then all of them cancelled;
   * scale from zero (``min_instances`` 0): submit one job, time until its process starts; then
     scale-down precision with ``idle_time_before_scale_down`` = 5 s: node idle -> node gone from
     ``GET {ws}/computes/{name}/nodes``, minus 5 s;
3. peer Ray (``bench/_ray_peer.py`` under a separate interpreter with Ray installed; see
   ``ray_python()``): tasks with ``num_cpus=1`` (latency, tiny-task throughput) and the Jobs API
   (latency, jobs/s), against a local ``ray start --head``;
4. peer Slurm (``bench/_slurm_peer.py``, in-process; installs Debian's packages when root with
   apt-get, else skips with the reason): a throwaway slurmctld + 2 slurmd (1 CPU each) + munged on
   loopback; ``sbatch --wrap`` and ``srun`` latency, ``sbatch`` and ``--array`` throughput.

Everything is loopback, bounded by counts and deadlines; agents, servers, Slurm daemons and temp
homes are removed at the end.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import _results, _slurm_peer
from bench._server import (
    REPO_ROOT,
    ServerProcess,
    kill_node_processes,
    node_processes,
    read_vm_rss_kib,
    start_cloudlet,
)
from bench._stats import ratio, summarize_ns

NAME = "dispatch"
PAYLOAD = "date +%s.%N"
SIZE = "Standard_DS3_v2"
WARM = "bench-warm"
QUEUE = "bench-queue"
ZERO = "bench-zero"
SCALE_DOWN_IDLE_S = 5
SUBMIT_THREADS = 8
RAY_VERSION = "2.60.0"
RAY_VENV = Path("/tmp/cloudlet-bench-ray")
# The bar (reported, never enforced).
BAR = {
    "warm_p50_ms": 20.0,
    "warm_p99_ms": 100.0,
    "throughput_jobs_s": 250.0,
    "scale_from_zero_s": 1.0,
    "scale_down_overshoot_s": 1.0,
    "agent_rss_mib": 40.0,
}
# Measured earlier on this machine (not in this run): context only.
EARLIER_REFERENCE = {
    "ray_jobs_api": {"latency_s": 2.0, "jobs_per_s": 0.67},
    "ray_tasks": {"latency_ms": 5.0, "jobs_per_s": 235.0},
}


@dataclass(frozen=True)
class Plan:
    warm_jobs: int
    throughput_jobs: int
    queued_jobs: int
    scale_reps: int
    floor_latency: int
    floor_throughput: int
    ray_task_latency: int
    ray_task_throughput: int
    ray_jobs_latency: int
    ray_jobs_throughput: int
    throughput_deadline_s: float
    ray_deadline_s: float

    @classmethod
    def make(cls, quick: bool) -> Plan:
        if quick:
            return cls(100, 200, 300, 2, 100, 200, 100, 200, 5, 5, 150.0, 240.0)
        return cls(300, 1000, 1000, 4, 300, 1000, 300, 1000, 20, 20, 420.0, 420.0)


# -- small helpers ------------------------------------------------------------------------------
def _ns(seconds: list[float]) -> list[int]:
    return [int(s * 1e9) for s in seconds]


def _first_float(text: str) -> float | None:
    for line in text.splitlines():
        try:
            return float(line.strip())
        except ValueError:
            continue
    return None


def _agent_rss(home: Path) -> dict[str, Any]:
    agents = {pid: info["node"] for pid, info in node_processes(home).items() if info["kind"] == "agent"}
    per = {node: read_vm_rss_kib(pid) for pid, node in agents.items()}
    values = [v for v in per.values() if v]
    return {"per_node_kib": per, "max_kib": max(values) if values else None, "count": len(values)}


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_cpu_share(pid: int, window_s: float) -> float | None:
    """Share of one CPU the server process used over WINDOW_S (idle clients: its own loops)."""
    before = _cpu_seconds(pid)
    time.sleep(window_s)
    after = _cpu_seconds(pid)
    if before is None or after is None:
        return None
    return round((after - before) / window_s, 4)


def _status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _cpu_snapshot(server: ServerProcess, home: Path) -> dict[str, float]:
    """CPU seconds used so far by the server, this home's agents (their own time, not their runs')
    and this benchmark process (the client)."""
    agents = [pid for pid, info in node_processes(home).items() if info["kind"] == "agent"]
    times = os.times()
    return {
        "server": _cpu_seconds(server.pid) or 0.0,
        "agents": sum(_cpu_seconds(pid) or 0.0 for pid in agents),
        "client": times.user + times.system,
    }


def _cpu_per_job(before: dict[str, float], after: dict[str, float], jobs: int) -> dict[str, float]:
    """CPU milliseconds per job spent by each party between two snapshots."""
    return {key: round((after[key] - before[key]) * 1000 / max(jobs, 1), 2) for key in before}


class Db:
    """Read-only view of the server's SQLite file (the server's own timestamps, no API load)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10, check_same_thread=False)

    def close(self) -> None:
        self.conn.close()

    def count(self, prefix: str, statuses: tuple[str, ...]) -> int:
        marks = ",".join("?" * len(statuses))
        row = self.conn.execute(
            f"SELECT count(*) FROM jobs WHERE name LIKE ? AND status IN ({marks})",
            (prefix + "%", *statuses),
        ).fetchone()
        return int(row[0])

    def job_times(self, prefix: str) -> dict[str, dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT j.name, j.submitted_at, j.ended_at, j.status, r.assigned_at, r.node_id, r.id "
            "FROM jobs j LEFT JOIN job_runs r ON r.job_id = j.id AND r.attempt = j.attempt "
            "WHERE j.name LIKE ?",
            (prefix + "%",),
        ).fetchall()
        return {
            name: {
                "submitted_at": sub,
                "ended_at": end,
                "status": st,
                "assigned_at": asg,
                "node": node,
                "run": run,
            }
            for name, sub, end, st, asg, node, run in rows
        }

    def wait_ended(self, name: str, timeout: float, interval: float = 0.01) -> str | None:
        """Poll the job's status in the file (no request to the server) until it has ended."""
        deadline = time.monotonic() + timeout
        status = None
        while time.monotonic() < deadline:
            row = self.conn.execute("SELECT status FROM jobs WHERE name = ?", (name,)).fetchone()
            status = row[0] if row else None
            if status in ("Completed", "Failed", "Canceled"):
                return str(status)
            time.sleep(interval)
        return status

    def node(self, node_id: str) -> dict[str, Any]:
        row = self.conn.execute(
            "SELECT created_at, registered_at, idle_since, ended_at FROM nodes WHERE id = ?", (node_id,)
        ).fetchone()
        keys = ("created_at", "registered_at", "idle_since", "ended_at")
        return dict(zip(keys, row, strict=True)) if row else {}


class Api:
    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.ws = server.ws_path
        self.client = httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=30)

    def new_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.endpoint, headers=self.server.headers(), timeout=30)

    def close(self) -> None:
        self.client.close()

    def create_cluster(self, name: str, min_n: int, max_n: int, idle_s: int) -> dict[str, Any]:
        body = {
            "name": name,
            "type": "amlcompute",
            "size": SIZE,
            "min_instances": min_n,
            "max_instances": max_n,
            "idle_time_before_scale_down": idle_s,
        }
        resp = self.client.put(f"{self.ws}/computes/{name}", json=body)
        if resp.status_code not in (200, 201):
            raise RuntimeError(f"PUT compute {name} -> {resp.status_code}: {resp.text}")
        return self._wait_operation(resp.headers.get("Operation-Location"))

    def delete_cluster(self, name: str) -> dict[str, Any]:
        resp = self.client.delete(f"{self.ws}/computes/{name}")
        if resp.status_code not in (200, 202, 204):
            return {"status": f"HTTP {resp.status_code}"}
        return self._wait_operation(resp.headers.get("Operation-Location"))

    def _wait_operation(self, url: str | None, timeout: float = 60) -> dict[str, Any]:
        if not url:
            return {}
        deadline = time.monotonic() + timeout
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            body = self.client.get(url).json()
            if body.get("status") != "InProgress":
                return {"status": body.get("status"), "error": body.get("error")}
            time.sleep(0.1)
        return {"status": "InProgress", "note": f"still in progress after {timeout}s"}

    def nodes(self, cluster: str) -> list[dict[str, Any]]:
        resp = self.client.get(f"{self.ws}/computes/{cluster}/nodes")
        resp.raise_for_status()
        nodes: list[dict[str, Any]] = resp.json()["nodes"]
        return nodes

    def wait_idle_nodes(self, cluster: str, count: int, timeout: float = 90) -> float:
        t0 = time.monotonic()
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            if sum(n["state"] == "idle" for n in self.nodes(cluster)) >= count:
                return time.monotonic() - t0
            time.sleep(0.1)
        raise RuntimeError(f"{cluster}: {count} idle nodes not reached in {timeout}s: {self.nodes(cluster)}")

    def submit(self, name: str, command: str, cluster: str, client: httpx.Client | None = None) -> float:
        """PUT the job; returns the PUT's duration in seconds."""
        t0 = time.perf_counter()
        resp = (client or self.client).put(
            f"{self.ws}/jobs/{name}", json={"command": command, "compute": f"azureml:{cluster}"}
        )
        took = time.perf_counter() - t0
        if resp.status_code not in (200, 201):
            raise RuntimeError(f"PUT job {name} -> {resp.status_code}: {resp.text}")
        return took

    def wait_log(self, name: str, timeout: float, interval: float = 0.02) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = str(self.client.get(f"{self.ws}/jobs/{name}/logs").json().get("data") or "")
            if data.strip():
                return data
            time.sleep(interval)
        return ""

    def log(self, name: str) -> str:
        return str(self.client.get(f"{self.ws}/jobs/{name}/logs").json().get("data") or "")

    def cancel(self, name: str, client: httpx.Client | None = None) -> int:
        return (client or self.client).post(f"{self.ws}/jobs/{name}/cancel").status_code


def _parallel(names: list[str], threads: int, make: Callable[[], httpx.Client], fn: Any) -> list[Any]:
    """Call fn(client, name) for every name with THREADS workers, one keep-alive client each."""
    local = threading.local()
    clients: list[httpx.Client] = []
    lock = threading.Lock()

    def work(name: str) -> Any:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = make()
            with lock:
                clients.append(client)
        return fn(client, name)

    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            return list(pool.map(work, names))
    finally:
        for client in clients:
            client.close()


# -- peer: subprocess ---------------------------------------------------------------------------
def _floor(plan: Plan) -> dict[str, Any]:
    def spawn_latency(argv: list[str], n: int) -> list[float]:
        out = []
        for _ in range(n):
            t0 = time.time()
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True)
            ts = _first_float(proc.stdout)
            if ts is not None:
                out.append(ts - t0)
        return out

    spawn_latency(["date", "+%s.%N"], 10)  # warm the page cache
    direct = spawn_latency(["date", "+%s.%N"], plan.floor_latency)
    via_bash = spawn_latency(["bash", "-c", PAYLOAD], plan.floor_latency)

    def run_true(_: int) -> None:
        subprocess.run(["bash", "-c", "true"], timeout=10, check=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run_true, range(plan.floor_throughput)))
    wall = time.perf_counter() - t0
    return {
        "date": summarize_ns(_ns(direct)),
        "bash_c_date": summarize_ns(_ns(via_bash)),
        "throughput": {
            "count": plan.floor_throughput,
            "workers": 2,
            "wall_s": round(wall, 4),
            "jobs_per_s": round(plan.floor_throughput / wall, 1),
        },
    }


# -- cloudlet phases ----------------------------------------------------------------------------
def _run_dir_mtime(home: Path, node: str | None, run: str | None) -> float | None:
    """When the agent made the run's working directory (``work/<run>``: nothing writes in it after,
    for these jobs): the moment the agent began the run. Filesystem time, a few ms coarse."""
    if not node or not run:
        return None
    try:
        return (home / "nodes" / node / "work" / run).stat().st_mtime_ns / 1e9
    except OSError:
        return None


def _warm_latency(api: Api, db: Db, home: Path, n: int) -> dict[str, Any]:
    for i in range(5):  # warm-up, discarded
        api.submit(f"warmup-{i}", PAYLOAD, WARM)
        db.wait_ended(f"warmup-{i}", 30)
    samples: list[dict[str, Any]] = []
    failures: list[str] = []
    cpu_before = _cpu_snapshot(api.server, home)
    for i in range(n):
        name = f"warm-{i:04d}"
        t0 = time.time()
        put_s = api.submit(name, PAYLOAD, WARM)
        status = db.wait_ended(name, 30)
        ts = _first_float(api.log(name))  # the process's own timestamp, read through the API
        if status != "Completed" or ts is None:
            failures.append(f"{name}: {status}")
            continue
        samples.append({"name": name, "t0": t0, "put_s": put_s, "start_ts": ts})
    cpu = _cpu_per_job(cpu_before, _cpu_snapshot(api.server, home), n)
    times = db.job_times("warm-")
    keys = ("api_to_record", "record_to_placed", "placed_to_agent", "agent_to_start", "start_to_ended")
    parts: dict[str, list[float]] = {key: [] for key in keys}
    for s in samples:
        t = times.get(s["name"]) or {}
        if not (t.get("submitted_at") and t.get("assigned_at")):
            continue
        parts["api_to_record"].append(t["submitted_at"] - s["t0"])
        parts["record_to_placed"].append(t["assigned_at"] - t["submitted_at"])
        agent_at = _run_dir_mtime(home, t.get("node"), t.get("run"))
        if agent_at is not None:
            parts["placed_to_agent"].append(agent_at - t["assigned_at"])
            parts["agent_to_start"].append(s["start_ts"] - agent_at)
        if t.get("ended_at"):
            parts["start_to_ended"].append(t["ended_at"] - s["start_ts"])
    return {
        "latency": summarize_ns(_ns([s["start_ts"] - s["t0"] for s in samples])),
        "put": summarize_ns(_ns([s["put_s"] for s in samples])),
        "breakdown": {key: summarize_ns(_ns(vals)) for key, vals in parts.items() if vals},
        "cpu_ms_per_job": cpu,
        "failures": failures[:10],
        "failed": len(failures),
    }


def _busy_agent_rss(api: Api, db: Db, home: Path) -> dict[str, Any]:
    names = ["busy-0", "busy-1"]
    for name in names:
        api.submit(name, f"{PAYLOAD}; sleep 3", WARM)
    for name in names:
        api.wait_log(name, 15)
    rss = _agent_rss(home)
    for name in names:
        db.wait_ended(name, 30, interval=0.1)
    return rss


def _node_turnaround(times: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per node, in placement order: previous job ended -> next job placed on that node (the
    server's turnaround), and placed -> ended (dispatch + run + exit)."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for t in times.values():
        if t.get("node") and t.get("assigned_at") and t.get("ended_at"):
            by_node.setdefault(t["node"], []).append(t)
    gaps: list[float] = []
    spans: list[float] = []
    for rows in by_node.values():
        rows.sort(key=lambda t: t["assigned_at"])
        spans += [t["ended_at"] - t["assigned_at"] for t in rows]
        gaps += [nxt["assigned_at"] - prev["ended_at"] for prev, nxt in itertools.pairwise(rows)]
    return {
        "ended_to_next_placed": summarize_ns(_ns(gaps)) if gaps else None,
        "placed_to_ended": summarize_ns(_ns(spans)) if spans else None,
        "nodes": len(by_node),
    }


def _throughput(api: Api, db: Db, home: Path, n: int, deadline_s: float) -> dict[str, Any]:
    names = [f"tp-{i:05d}" for i in range(n)]
    cpu_before = _cpu_snapshot(api.server, home)
    t_first = time.time()
    t0 = time.perf_counter()
    put_s = _parallel(
        names, SUBMIT_THREADS, api.new_client, lambda c, name: api.submit(name, "true", WARM, c)
    )
    submit_wall = time.perf_counter() - t0
    deadline = time.monotonic() + deadline_s
    done = 0
    while time.monotonic() < deadline:
        done = db.count("tp-", ("Completed", "Failed", "Canceled"))
        if done >= n:
            break
        time.sleep(0.2)
    seen_wall = time.time() - t_first
    cpu = _cpu_per_job(cpu_before, _cpu_snapshot(api.server, home), n)
    times = db.job_times("tp-")
    ends = [t["ended_at"] for t in times.values() if t["ended_at"]]
    completed = sum(1 for t in times.values() if t["status"] == "Completed")
    e2e = (max(ends) - t_first) if ends else None
    # confirm through the API (one list call): every job Completed
    listed = api.client.get(f"{api.ws}/jobs", params={"compute": WARM, "status": "Completed"}).json()
    api_completed = sum(1 for j in listed.get("value", []) if str(j.get("name", "")).startswith("tp-"))
    return {
        "count": n,
        "submit_threads": SUBMIT_THREADS,
        "submit_wall_s": round(submit_wall, 4),
        "submit_rate_per_s": round(n / submit_wall, 1),
        "put": summarize_ns(_ns(put_s)),
        "completed": completed,
        "completed_per_api": api_completed,
        "ended": len(ends),
        "timed_out": done < n,
        "end_to_end_s": round(e2e, 4) if e2e else None,
        "observed_wall_s": round(seen_wall, 4),
        "jobs_per_s": round(completed / e2e, 2) if e2e else None,
        "cpu_ms_per_job": cpu,
        "turnaround": _node_turnaround(times),
    }


def _queue_rss(api: Api, db: Db, server: ServerProcess, n: int) -> dict[str, Any]:
    api.create_cluster(QUEUE, 1, 1, 600)
    api.wait_idle_nodes(QUEUE, 1)
    api.submit("q-sleeper", "sleep 60", QUEUE)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and db.count("q-sleeper", ("Preparing", "Running")) < 1:
        time.sleep(0.1)
    out: dict[str, Any] = {"queued_target": n}
    out["rss_before_kib"] = server.rss_kib()
    out["server_cpu_share_before"] = _server_cpu_share(server.pid, 3.0)
    names = [f"q-{i:05d}" for i in range(n)]
    t0 = time.perf_counter()
    put_s = _parallel(
        names, SUBMIT_THREADS, api.new_client, lambda c, name: api.submit(name, "true", QUEUE, c)
    )
    out["submit_wall_s"] = round(time.perf_counter() - t0, 4)
    tenth = max(1, n // 10)
    out["put_first_tenth"] = summarize_ns(_ns(put_s[:tenth]))
    out["put_last_tenth"] = summarize_ns(_ns(put_s[-tenth:]))
    time.sleep(1.0)
    out["queued"] = db.count("q-", ("Queued",))
    out["rss_with_queue_kib"] = server.rss_kib()
    out["server_cpu_share_with_queue"] = _server_cpu_share(server.pid, 3.0)
    probes = []  # warm dispatches on the other (idle, 2-node) cluster while this queue exists
    for i in range(10):
        t1 = time.time()
        api.submit(f"qprobe-{i}", PAYLOAD, WARM)
        db.wait_ended(f"qprobe-{i}", 30)
        ts = _first_float(api.log(f"qprobe-{i}"))
        if ts is not None:
            probes.append(ts - t1)
    out["warm_dispatch_with_queue"] = summarize_ns(_ns(probes))
    t0 = time.perf_counter()
    codes = _parallel(
        [*names, "q-sleeper"], SUBMIT_THREADS, api.new_client, lambda c, name: api.cancel(name, c)
    )
    out["cancel_wall_s"] = round(time.perf_counter() - t0, 4)
    out["cancel_status_codes"] = {str(code): codes.count(code) for code in sorted(set(codes))}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and db.count("q-", ("Queued", "Preparing", "Running")) > 0:
        time.sleep(0.2)
    out["left_active_after_cancel"] = db.count("q-", ("Queued", "Preparing", "Running"))
    out["rss_after_cancel_kib"] = server.rss_kib()
    out["server_hwm_kib"] = _status_kib(server.pid, "VmHWM")
    return out


def _scale(api: Api, db: Db, reps: int) -> dict[str, Any]:
    api.create_cluster(ZERO, 0, 1, SCALE_DOWN_IDLE_S)
    rows: list[dict[str, Any]] = []
    for rep in range(reps):
        # from zero: no node of this cluster exists
        wait_until = time.monotonic() + 30
        while api.nodes(ZERO) and time.monotonic() < wait_until:
            time.sleep(0.1)
        name = f"zero-{rep}"
        t0 = time.time()
        api.submit(name, PAYLOAD, ZERO)
        status = db.wait_ended(name, 60)
        ts = _first_float(api.log(name))
        row: dict[str, Any] = {"job": name, "status": status}
        times = db.job_times(name).get(name) or {}
        node_id = times.get("node")
        if ts is not None:
            row["submit_to_start_s"] = round(ts - t0, 4)
        if node_id:
            node = db.node(node_id)
            if node.get("created_at") and node.get("registered_at") and ts is not None:
                row["submit_to_node_record_s"] = round(node["created_at"] - t0, 4)
                row["node_record_to_registered_s"] = round(node["registered_at"] - node["created_at"], 4)
                row["registered_to_start_s"] = round(ts - node["registered_at"], 4)
        # scale down: node idle -> gone from /nodes
        idle_since: float | None = None
        left_idle: float | None = None
        gone: float | None = None
        deadline = time.monotonic() + SCALE_DOWN_IDLE_S + 30
        while time.monotonic() < deadline:
            nodes = [n for n in api.nodes(ZERO) if n["nodeId"] == node_id]
            now = time.time()
            if not nodes:
                gone = now
                break
            node_doc = nodes[0]
            if node_doc["state"] == "idle" and node_doc.get("idle_since"):
                idle_since = float(node_doc["idle_since"])
            elif idle_since is not None and left_idle is None:
                left_idle = now
            time.sleep(0.05)
        if idle_since is None and node_id:
            idle_since = db.node(node_id).get("idle_since")
        if idle_since and gone:
            row["idle_to_gone_s"] = round(gone - idle_since, 4)
            row["overshoot_s"] = round(gone - idle_since - SCALE_DOWN_IDLE_S, 4)
        if idle_since and left_idle:
            row["idle_to_terminating_s"] = round(left_idle - idle_since, 4)
        if node_id:
            ended = db.node(node_id).get("ended_at")
            if ended and idle_since:
                row["idle_to_terminated_record_s"] = round(ended - idle_since, 4)
        rows.append(row)

    def col(key: str) -> list[float]:
        return [r[key] for r in rows if r.get(key) is not None]

    starts, over = col("submit_to_start_s"), col("overshoot_s")
    return {
        "reps": rows,
        "idle_time_before_scale_down_s": SCALE_DOWN_IDLE_S,
        "from_zero": summarize_ns(_ns(starts)) if starts else None,
        "from_zero_worst_s": max(starts) if starts else None,
        "overshoot": summarize_ns(_ns(over)) if over else None,
        "overshoot_worst_s": max(over) if over else None,
    }


def _cloudlet(plan: Plan, tmp: Path) -> dict[str, Any]:
    home = tmp / "home"
    out: dict[str, Any] = {}
    server = start_cloudlet(home)
    api = Api(server)
    db: Db | None = None
    try:
        out["server_rss_start_kib"] = server.rss_kib()
        t0 = time.perf_counter()
        out["create_warm"] = api.create_cluster(WARM, 2, 2, 600)
        out["two_nodes_idle_s"] = round(api.wait_idle_nodes(WARM, 2) + (time.perf_counter() - t0), 3)
        db = Db(home / "cloudlet.db")
        time.sleep(1.0)
        out["agent_rss_idle"] = _agent_rss(home)
        print("   warm dispatch latency ...", flush=True)
        out["warm"] = _warm_latency(api, db, home, plan.warm_jobs)
        out["agent_rss_busy"] = _busy_agent_rss(api, db, home)
        print("   throughput ...", flush=True)
        out["throughput"] = _throughput(api, db, home, plan.throughput_jobs, plan.throughput_deadline_s)
        out["agent_rss_after_throughput"] = _agent_rss(home)
        out["server_rss_after_throughput_kib"] = server.rss_kib()
        print("   queued jobs ...", flush=True)
        out["queue"] = _queue_rss(api, db, server, plan.queued_jobs)
        out["delete_warm"] = api.delete_cluster(WARM)
        out["delete_queue"] = api.delete_cluster(QUEUE)
        print("   scale from zero / scale down ...", flush=True)
        out["scale"] = _scale(api, db, plan.scale_reps)
        out["delete_zero"] = api.delete_cluster(ZERO)
        out["server_rss_end_kib"] = server.rss_kib()
        out["server_hwm_kib"] = _status_kib(server.pid, "VmHWM")
        if server.process.poll() is not None:
            raise RuntimeError(f"the cloudlet server exited ({server.process.returncode}) mid-benchmark")
        return out
    finally:
        if db is not None:
            db.close()
        api.close()
        server.stop()
        out["leftover_node_processes_killed"] = kill_node_processes(home)


# -- peer: Ray ----------------------------------------------------------------------------------
def ray_python() -> tuple[Path | None, str]:
    """The interpreter with Ray: $BENCH_RAY_PYTHON, else the venv under /tmp (created with
    ``pip install ray[default]==RAY_VERSION`` unless BENCH_RAY_INSTALL=0). (None, why) if none."""
    explicit = os.environ.get("BENCH_RAY_PYTHON")
    if explicit:
        return (
            (Path(explicit), "BENCH_RAY_PYTHON") if Path(explicit).exists() else (None, f"{explicit} missing")
        )
    python = RAY_VENV / "bin" / "python"
    probe = [str(python), "-c", "import ray, ray.job_submission; print(ray.__version__)"]
    if python.exists() and subprocess.run(probe, capture_output=True, timeout=120).returncode == 0:
        return python, f"existing venv {RAY_VENV}"
    if os.environ.get("BENCH_RAY_INSTALL", "1") == "0":
        return None, f"no Ray venv at {RAY_VENV} and BENCH_RAY_INSTALL=0"
    print(f"   installing ray[default]=={RAY_VERSION} into {RAY_VENV} ...", flush=True)
    try:
        subprocess.run(
            ["python3.11", "-m", "venv", str(RAY_VENV)], check=True, timeout=120, capture_output=True
        )
        subprocess.run(
            [str(RAY_VENV / "bin" / "pip"), "install", "-q", f"ray[default]=={RAY_VERSION}"],
            check=True,
            timeout=600,
            capture_output=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        return None, f"pip install ray failed: {exc} {detail.decode(errors='replace')[-300:]}"
    if subprocess.run(probe, capture_output=True, timeout=120).returncode != 0:
        return None, "ray installed but does not import"
    return python, f"installed into {RAY_VENV}"


def _ray(plan: Plan, tmp: Path) -> dict[str, Any]:
    python, how = ray_python()
    if python is None:
        return {"skipped": how}
    out_path = tmp / "ray.json"
    cmd = [
        str(python),
        str(Path(__file__).with_name("_ray_peer.py")),
        str(out_path),
        f"--task-latency={plan.ray_task_latency}",
        f"--task-throughput={plan.ray_task_throughput}",
        f"--jobs-latency={plan.ray_jobs_latency}",
        f"--jobs-throughput={plan.ray_jobs_throughput}",
        f"--deadline={plan.ray_deadline_s}",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    log = tmp / "ray-peer.log"
    try:
        with open(log, "wb") as fh:
            proc = subprocess.run(
                cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=plan.ray_deadline_s + 120, env=env
            )
    except subprocess.TimeoutExpired:
        return {"skipped": "the Ray peer ran past its deadline", "how": how}
    if not out_path.exists():
        return {
            "skipped": f"the Ray peer wrote nothing (exit {proc.returncode})",
            "log_tail": log.read_text()[-2000:],
        }
    data: dict[str, Any] = json.loads(out_path.read_text())
    data["interpreter"] = how
    data["exit_code"] = proc.returncode
    if proc.returncode:
        data["log_tail"] = log.read_text(errors="replace")[-2000:]
    return data


# -- the run ------------------------------------------------------------------------------------
def _get(data: dict[str, Any], *path: str) -> Any:
    cur: Any = data
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else float("nan")


def _comparisons(data: dict[str, Any]) -> dict[str, Any]:
    """Latency ratios cloudlet / peer (lower is better); throughput ratios cloudlet / peer (share
    of the peer's rate: higher is better)."""
    warm = _get(data, "cloudlet", "warm", "latency") or {}
    tput = _num(_get(data, "cloudlet", "throughput", "jobs_per_s"))
    peers = {
        "subprocess date": (_get(data, "subprocess", "date"), None),
        "subprocess bash -c": (
            _get(data, "subprocess", "bash_c_date"),
            _get(data, "subprocess", "throughput"),
        ),
        "ray task": (_get(data, "ray", "tasks", "latency"), _get(data, "ray", "tasks", "throughput")),
        "ray jobs api": (_get(data, "ray", "jobs", "latency"), _get(data, "ray", "jobs", "throughput")),
        **_slurm_peer.peers(data.get("slurm") or {}),
    }
    out: dict[str, Any] = {}
    for peer, (lat, thr) in peers.items():
        lat = lat or {}
        out[peer] = {
            "p50_ms": lat.get("p50_ms"),
            "p99_ms": lat.get("p99_ms"),
            "jobs_per_s": (thr or {}).get("jobs_per_s"),
            "latency_p50_ratio": ratio(_num(warm.get("p50_ms")), _num(lat.get("p50_ms"))),
            "latency_p99_ratio": ratio(_num(warm.get("p99_ms")), _num(lat.get("p99_ms"))),
            "throughput_ratio": ratio(tput, _num((thr or {}).get("jobs_per_s"))) if thr else None,
        }
    return out


def _bar(data: dict[str, Any]) -> dict[str, Any]:
    warm = _get(data, "cloudlet", "warm", "latency") or {}
    scale = _get(data, "cloudlet", "scale") or {}
    rss_values = [
        _get(data, "cloudlet", key, "max_kib")
        for key in ("agent_rss_idle", "agent_rss_busy", "agent_rss_after_throughput")
    ]
    rss_mib = max((v for v in rss_values if v), default=None)
    rss_mib = round(rss_mib / 1024, 1) if rss_mib else None

    def check(value: Any, limit: float) -> dict[str, Any]:
        ok = None if value is None else bool(value <= limit)
        return {"value": value, "limit": limit, "holds": ok}

    tput = _get(data, "cloudlet", "throughput", "jobs_per_s")
    return {
        "warm_p50_ms": check(warm.get("p50_ms"), BAR["warm_p50_ms"]),
        "warm_p99_ms": check(warm.get("p99_ms"), BAR["warm_p99_ms"]),
        "throughput_jobs_s": {
            "value": tput,
            "limit": BAR["throughput_jobs_s"],
            "holds": None if tput is None else bool(tput >= BAR["throughput_jobs_s"]),
        },
        "scale_from_zero_s": check(scale.get("from_zero_worst_s"), BAR["scale_from_zero_s"]),
        "scale_down_overshoot_s": check(scale.get("overshoot_worst_s"), BAR["scale_down_overshoot_s"]),
        "agent_rss_mib": check(rss_mib, BAR["agent_rss_mib"]),
    }


def run(quick: bool = False) -> dict[str, Any]:
    plan = Plan.make(quick)
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = plan.__dict__ | {"quick": quick}
    data["earlier_reference"] = EARLIER_REFERENCE
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-dispatch-"))
    try:
        print("   subprocess floor ...", flush=True)
        data["subprocess"] = _floor(plan)
        data["loadavg_before_cloudlet"] = _results.loadavg()
        data["cloudlet"] = _cloudlet(plan, tmp)
        data["loadavg_before_ray"] = _results.loadavg()
        print("   ray ...", flush=True)
        data["ray"] = _ray(plan, tmp)
        data["loadavg_before_slurm"] = _results.loadavg()
        print("   slurm ...", flush=True)
        data["slurm"] = _slurm_peer.measure(_slurm_peer.SlurmPlan.make(quick, SUBMIT_THREADS))
        data["comparisons"] = _comparisons(data)
        data["bar"] = _bar(data)
        data["loadavg_end"] = _results.loadavg()
        return data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- output -------------------------------------------------------------------------------------
def _holds(entry: dict[str, Any]) -> str:
    return {True: "holds", False: "does NOT hold", None: "not measured"}[entry.get("holds")]


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    c = data["cloudlet"]
    machine = data["machine"]
    warm, tp, q, sc = c["warm"], c["throughput"], c["queue"], c["scale"]
    ray = data.get("ray") or {}
    floor = data["subprocess"]
    lines = [
        f"## dispatch — {data['timestamp']}",
        "",
        f"Machine: {machine['nproc']} usable CPUs, Python {machine['python']}, {machine['platform']}; "
        f"load average {data.get('loadavg_start')} at start, {data.get('loadavg_before_cloudlet')} before "
        f"cloudlet, {data.get('loadavg_before_ray')} before Ray, {data.get('loadavg_before_slurm')} before "
        f"Slurm, {data.get('loadavg_end')} at end; "
        f"git {data.get('git', {}).get('commit', '?')}"
        f"{' (src dirty)' if data.get('git', {}).get('src_dirty') else ''}"
        f"{'; --quick' if data['plan']['quick'] else ''}.",
        "",
        f"Warm dispatch: {warm['latency']['count']} `{PAYLOAD}` jobs one at a time on a warm 2-node cluster "
        f"(submit -> user process start, from the printed timestamp). Throughput: {tp['count']} `true` jobs, "
        f"{tp['submit_threads']} submitting threads, until all Completed. Peers measured in the same run.",
        "",
        "| series | p50 ms | p99 ms | jobs/s | cloudlet/peer p50 | cloudlet/peer p99 "
        "| cloudlet/peer jobs/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| **cloudlet** | {f(warm['latency']['p50_ms'], 1)} | {f(warm['latency']['p99_ms'], 1)} | "
        f"{f(tp['jobs_per_s'], 1)} | | | |",
    ]
    for peer, cmp in data["comparisons"].items():
        lines.append(
            f"| {peer} | {f(cmp['p50_ms'], 1)} | {f(cmp['p99_ms'], 1)} | {f(cmp['jobs_per_s'], 1)} | "
            f"{f(cmp['latency_p50_ratio'])} | {f(cmp['latency_p99_ratio'])} | "
            f"{f(cmp['throughput_ratio'], 3)} |"
        )
    b = warm["breakdown"]
    lines += [
        "",
        "Latency: lower is better (ratio 10 = cloudlet takes 10× as long). Jobs/s ratio: cloudlet's share of "
        "the peer's rate (1.0 = parity). `subprocess date` has no throughput row; `subprocess bash -c` runs "
        "`bash -c true` with 2 workers (the cluster's 2 nodes). Ray tasks: `num_cpus=1`, "
        f"{f(_get(ray, 'tasks', 'throughput', 'count'))} no-op tasks for throughput; Ray Jobs API: "
        f"`{PAYLOAD}` entrypoint, {f(_get(ray, 'jobs', 'throughput', 'count'))} jobs for throughput."
        + (f" Ray skipped: {ray['skipped']}." if ray.get("skipped") else f" Ray {ray.get('ray_version')}.")
        + " "
        + _slurm_peer.describe(data.get("slurm")),
        "",
        "Where warm dispatch time goes (p50 / p99 ms, server's own timestamps):",
        "",
        "| segment | p50 ms | p99 ms |",
        "|---|---:|---:|",
        f"| PUT round trip (client) | {f(warm['put']['p50_ms'], 1)} | {f(warm['put']['p99_ms'], 1)} |",
    ]
    segments = (
        ("api_to_record", "client wall before PUT -> job row made (`jobs.submitted_at`, before its commit)"),
        ("record_to_placed", "job row -> placed on a node (`job_runs.assigned_at`, cluster reconciler pass)"),
        (
            "placed_to_agent",
            "placed -> agent begins the run (rest of the pass, commit, wake, long-poll answer; "
            "`work/<run>` mtime)",
        ),
        ("agent_to_start", "agent begins -> user process printed its timestamp (spool, env, `bash -c`)"),
        ("start_to_ended", "process start -> job ended (`jobs.ended_at`, the agent's exit time)"),
    )
    for key, label in segments:
        seg = b.get(key)
        if seg:
            lines.append(f"| {label} | {f(seg['p50_ms'], 1)} | {f(seg['p99_ms'], 1)} |")
    lines += [
        "",
        f"Throughput detail: submit phase {f(tp['submit_wall_s'], 1)} s "
        f"({f(tp['submit_rate_per_s'], 0)} PUT/s, "
        f"PUT p50 {f(tp['put']['p50_ms'], 1)} ms, p99 {f(tp['put']['p99_ms'], 1)} ms); "
        f"{tp['completed']}/{tp['count']} Completed in {f(tp['end_to_end_s'], 1)} s end to end"
        f"{' (TIMED OUT)' if tp['timed_out'] else ''}. Per node, previous job ended -> next job placed: "
        f"p50 {f(_get(tp, 'turnaround', 'ended_to_next_placed', 'p50_ms'), 1)} ms, "
        f"p99 {f(_get(tp, 'turnaround', 'ended_to_next_placed', 'p99_ms'), 1)} ms; placed -> ended: "
        f"p50 {f(_get(tp, 'turnaround', 'placed_to_ended', 'p50_ms'), 1)} ms, "
        f"p99 {f(_get(tp, 'turnaround', 'placed_to_ended', 'p99_ms'), 1)} ms.",
        "",
        "CPU per job (ms; server / agents (own time) / benchmark client): warm series "
        + " / ".join(f(v, 1) for v in (warm.get("cpu_ms_per_job") or {}).values())
        + "; throughput run "
        + " / ".join(f(v, 1) for v in (tp.get("cpu_ms_per_job") or {}).values())
        + ".",
        "",
        f"Scale from zero (min 0, {len(sc['reps'])} reps): submit -> process start p50 "
        f"{f(_get(sc, 'from_zero', 'p50_ms'), 0)} ms, worst {f(sc['from_zero_worst_s'], 3)} s. "
        f"Scale down (idle_time_before_scale_down = {sc['idle_time_before_scale_down_s']} s): node gone from "
        f"/nodes at idle time + {f(_get(sc, 'overshoot', 'p50_ms'), 0)} ms (p50), worst + "
        f"{f(sc['overshoot_worst_s'], 3)} s.",
        "",
        "| rep | submit -> start s | node boot (record -> registered) s | idle -> terminating s | "
        "idle -> gone s | overshoot s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for i, r in enumerate(sc["reps"]):
        lines.append(
            f"| {i} | {f(r.get('submit_to_start_s'), 3)} | {f(r.get('node_record_to_registered_s'), 3)} | "
            f"{f(r.get('idle_to_terminating_s'), 3)} | {f(r.get('idle_to_gone_s'), 3)} | "
            f"{f(r.get('overshoot_s'), 3)} |"
        )
    ai, ab, at = c["agent_rss_idle"], c["agent_rss_busy"], c["agent_rss_after_throughput"]
    ray_rss = _get(ray, "rss_kib", "total")
    lines += [
        "",
        f"Memory: agent RSS idle {f(ai['max_kib'])} KiB, busy {f(ab['max_kib'])} KiB, "
        f"after the throughput run {f(at['max_kib'])} KiB (max over {ai['count']} agents). "
        f"Server RSS: {f(c['server_rss_start_kib'])} KiB "
        f"at start; with {q['queued']} queued jobs {f(q['rss_with_queue_kib'])} KiB (before: "
        f"{f(q['rss_before_kib'])} KiB); peak {f(c['server_hwm_kib'])} KiB."
        + (f" Ray's processes (head + workers) after its run: {f(ray_rss)} KiB in all." if ray_rss else ""),
        "",
        f"With {q['queued']} queued jobs: server CPU while clients are idle "
        f"{f(q['server_cpu_share_with_queue'], 3)} "
        f"of a core (before: {f(q['server_cpu_share_before'], 3)}); PUT p50 first tenth "
        f"{f(q['put_first_tenth']['p50_ms'], 1)} ms, last tenth {f(q['put_last_tenth']['p50_ms'], 1)} ms; "
        "a warm "
        f"dispatch on the other cluster p50 {f(_get(q, 'warm_dispatch_with_queue', 'p50_ms'), 1)} ms "
        f"(10 jobs); cancelling all took "
        f"{f(q['cancel_wall_s'], 1)} s.",
        "",
        "The issue's bar (reported, not enforced):",
        "",
        "| bar | value | limit | |",
        "|---|---:|---:|---|",
    ]
    labels = {
        "warm_p50_ms": "warm dispatch p50 (ms)",
        "warm_p99_ms": "warm dispatch p99 (ms)",
        "throughput_jobs_s": "tiny-job throughput (jobs/s, ≥)",
        "scale_from_zero_s": "scale from zero, worst rep (s)",
        "scale_down_overshoot_s": "idle node released after idle time + (s, worst)",
        "agent_rss_mib": "agent RSS, max (MiB)",
    }
    for key, entry in data["bar"].items():
        lines.append(f"| {labels[key]} | {f(entry['value'], 3)} | {f(entry['limit'], 0)} | {_holds(entry)} |")
    ref = data["earlier_reference"]
    lines += [
        "",
        "Earlier reference on this machine (not this run): Ray Jobs API "
        f"{ref['ray_jobs_api']['latency_s']} s per "
        f"job / {ref['ray_jobs_api']['jobs_per_s']} jobs/s; Ray tasks {ref['ray_tasks']['latency_ms']} ms / "
        f"{ref['ray_tasks']['jobs_per_s']} jobs/s. Floor this run: spawn `date` p50 "
        f"{f(floor['date']['p50_ms'], 2)} ms, `bash -c` {f(floor['bash_c_date']['p50_ms'], 2)} ms, "
        f"{f(floor['throughput']['jobs_per_s'], 0)} processes/s with 2 workers.",
    ]
    return "\n".join(lines)


def report(data: dict[str, Any]) -> str:
    f = _results.fmt
    c = data["cloudlet"]
    rows = [
        f"load average start {data.get('loadavg_start')} end {data.get('loadavg_end')}",
        f"cloudlet warm dispatch p50 {f(c['warm']['latency']['p50_ms'], 1)} ms p99 "
        f"{f(c['warm']['latency']['p99_ms'], 1)} ms; throughput {f(c['throughput']['jobs_per_s'], 1)} jobs/s",
    ]
    for peer, cmp in data["comparisons"].items():
        rows.append(
            f"vs {peer:<18} p50 {f(cmp['p50_ms'], 1):>8} ms  p99 {f(cmp['p99_ms'], 1):>8} ms  "
            f"{f(cmp['jobs_per_s'], 1):>8} jobs/s  ratio p50 {f(cmp['latency_p50_ratio'])}x "
            f"p99 {f(cmp['latency_p99_ratio'])}x jobs/s {f(cmp['throughput_ratio'], 3)}x"
        )
    if data.get("ray", {}).get("skipped"):
        rows.append(f"ray skipped: {data['ray']['skipped']}")
    rows.append(_slurm_peer.report_line(data.get("slurm")))
    for key, entry in data["bar"].items():
        rows.append(f"bar {key}: {f(entry['value'], 3)} (limit {entry['limit']}) -> {_holds(entry)}")
    return "\n".join(rows)
