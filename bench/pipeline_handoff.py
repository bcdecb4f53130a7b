"""Pipeline step hand-off: a step done → the next step's process started (goal: p50 ≤ 50 ms).

cloudlet: a real server with a warm 2-node cluster; N two-step pipelines, one at a time. Step
``a`` writes ``date +%s.%N`` to its output (its last act); step ``b`` reads that output (bound with
``${{parent.jobs.a.outputs.o}}``) and its first act is ``date +%s.%N``. Hand-off = b's start − a's
last instant (both the processes' own clocks): a's exit reported by its agent, the job Completed,
the parent-job loop woken, b submitted and placed on an idle node, its agent starting the process.
Also b's start − the moment the server recorded a Completed (``jobs.ended_at``).

Peer: the same two-step flow as Ray tasks (``bench/_pipeline_ray_peer.py`` under the interpreter
``bench.dispatch.ray_python`` finds or installs): ``b`` takes ``a``'s result and starts a process.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _results
from bench._dispatch_client import Api
from bench._server import REPO_ROOT, kill_node_processes, start_cloudlet
from bench._stats import summarize_ns
from bench.dispatch import ray_python

NAME = "pipeline_handoff"
CLUSTER = "bench-pipes"
GOAL_MS = 50.0
STEP_A = "date +%s.%N > ${{outputs.o}}/t"
STEP_B = "date +%s.%N; cat ${{inputs.i}}/t"


def _pipeline() -> dict[str, Any]:
    return {
        "type": "pipeline",
        "settings": {"default_compute": f"azureml:{CLUSTER}", "force_rerun": True},
        "jobs": {
            "a": {"command": STEP_A, "outputs": {"o": None}},
            "b": {"command": STEP_B, "inputs": {"i": "${{parent.jobs.a.outputs.o}}"}},
        },
    }


def _wait_ended(db: sqlite3.Connection, name: str, timeout: float) -> str | None:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        row = db.execute("SELECT status FROM jobs WHERE name = ?", (name,)).fetchone()
        status = row[0] if row else None
        if status in ("Completed", "Failed", "Canceled"):
            return str(status)
        time.sleep(0.01)
    return status


def _cloudlet(flows: int, tmp: Path) -> dict[str, Any]:
    home = tmp / "home"
    server = start_cloudlet(home)
    api = Api(server)
    out: dict[str, Any] = {}
    db: sqlite3.Connection | None = None
    try:
        api.create_cluster(CLUSTER, 2, 2, 600)
        out["two_nodes_idle_s"] = round(api.wait_idle_nodes(CLUSTER, 2), 3)
        db = sqlite3.connect(f"file:{home / 'cloudlet.db'}?mode=ro", uri=True, timeout=10)
        store = home / "data" / "workspaces" / "1" / "datastores" / "workspaceblobstore" / "azureml"
        to_process: list[int] = []
        from_completed: list[int] = []
        failed: list[str] = []
        for i in range(flows + 1):  # the first warms the path (not counted)
            name = f"ph-{i}"
            resp = api.client.put(f"{api.ws}/jobs/{name}", json=_pipeline())
            if resp.status_code != 201:
                raise RuntimeError(f"PUT pipeline {name} -> {resp.status_code}: {resp.text}")
            status = _wait_ended(db, name, 60)
            if status != "Completed":
                failed.append(f"{name}: {status}")
                continue
            a_done = float((store / f"{name}-a" / "o" / "t").read_text())
            b_start = float(api.log(f"{name}-b").split()[0])
            (a_ended,) = db.execute("SELECT ended_at FROM jobs WHERE name = ?", (f"{name}-a",)).fetchone()
            if i:
                to_process.append(int((b_start - a_done) * 1e9))
                from_completed.append(int((b_start - float(a_ended)) * 1e9))
        out["handoff_to_process"] = summarize_ns(to_process)
        out["completed_to_process"] = summarize_ns(from_completed)
        out["failed"] = failed
        out["delete"] = api.delete_cluster(CLUSTER)
        return out
    finally:
        if db is not None:
            db.close()
        api.close()
        server.stop()
        out["leftover_node_processes_killed"] = kill_node_processes(home)


def _ray(flows: int, tmp: Path) -> dict[str, Any]:
    python, how = ray_python()
    if python is None:
        return {"skipped": how}
    out_path = tmp / "ray.json"
    cmd = [
        str(python),
        str(Path(__file__).with_name("_pipeline_ray_peer.py")),
        str(out_path),
        f"--flows={flows}",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=400, env=env)
    except subprocess.TimeoutExpired:
        return {"skipped": "the Ray peer ran past its deadline", "how": how}
    if not out_path.exists():
        return {
            "skipped": f"the Ray peer wrote nothing (exit {proc.returncode})",
            "log": proc.stderr[-2000:].decode(),
        }
    data: dict[str, Any] = json.loads(out_path.read_text())
    data["interpreter"] = how
    return data


def run(quick: bool = False) -> dict[str, Any]:
    flows = 10 if quick else 40
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {"flows": flows, "quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-pipes-"))
    try:
        data["loadavg_start"] = _results.loadavg()
        print("   cloudlet ...", flush=True)
        data["cloudlet"] = _cloudlet(flows, tmp)
        data["loadavg_before_ray"] = _results.loadavg()
        print("   ray ...", flush=True)
        data["ray"] = _ray(flows, tmp)
        data["loadavg_end"] = _results.loadavg()
        p50 = data["cloudlet"]["handoff_to_process"]["p50_ms"]
        data["goal_met"] = bool(p50 == p50 and p50 <= GOAL_MS)
        return data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    c, ray = data["cloudlet"], data.get("ray") or {}
    hand, done = c["handoff_to_process"], c["completed_to_process"]
    rp, rt = ray.get("handoff_to_process") or {}, ray.get("handoff_to_task") or {}
    rows = [
        f"## pipeline_handoff — {data['timestamp']}",
        "",
        f"Machine: {data['machine']['nproc']} usable CPUs; load {data.get('loadavg_start')} at start, "
        f"{data.get('loadavg_end')} at end; {data['plan']['flows']} two-step pipelines one at a time on a "
        "warm 2-node cluster (step b reads step a's output).",
        "",
        "| series | n | p50 ms | p90 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        f"| cloudlet: a's last instant → b's process started | {hand['count']} | {f(hand['p50_ms'])} | "
        f"{f(hand['p90_ms'])} | {f(hand['max_ms'])} |",
        f"| cloudlet: a Completed (server) → b's process started | {done['count']} | {f(done['p50_ms'])} | "
        f"{f(done['p90_ms'])} | {f(done['max_ms'])} |",
    ]
    if rp:
        rows += [
            f"| Ray {ray.get('ray_version')} tasks: a returned → b's process started | {rp.get('n')} | "
            f"{f(rp.get('p50_ms'))} | {f(rp.get('p90_ms'))} | {f(rp.get('max_ms'))} |",
            f"| Ray tasks: a returned → b's task began (warm worker) | {rt.get('n')} | "
            f"{f(rt.get('p50_ms'))} | {f(rt.get('p90_ms'))} | {f(rt.get('max_ms'))} |",
        ]
    else:
        rows.append(f"| Ray | — | skipped: {ray.get('skipped') or ray.get('error')} | | |")
    verdict = "met" if data["goal_met"] else "NOT met"
    rows += ["", f"Goal: hand-off p50 ≤ {GOAL_MS:g} ms: {verdict}. Not completed: {len(c['failed'])}."]
    return "\n".join(rows) + "\n"


def report(data: dict[str, Any]) -> str:
    c, ray = data["cloudlet"], data.get("ray") or {}
    line = f"pipeline hand-off p50: cloudlet {c['handoff_to_process']['p50_ms']:.2f} ms"
    rp = ray.get("handoff_to_process")
    if rp:
        line += f", Ray tasks {rp['p50_ms']:.2f} ms (to a process)"
    return line + f" (goal ≤ {GOAL_MS:g} ms: {'met' if data['goal_met'] else 'NOT met'})"
