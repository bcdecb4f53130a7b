"""Sweep trials: a 50-trial sweep on 2 nodes, trials/s, beside Ray Tune running the same trials.

cloudlet: a warm cluster of 2 nodes (``min_instances: 2``), then a sweep job (``type: sweep``,
random sampling of ``x ~ uniform(0, 1)``, ``max_total_trials`` N, ``max_concurrent_trials`` 2)
whose trial is ``python -c CODE ${{search_space.x}}``: a new Python that imports MLflow and logs
its metric to cloudlet's tracking endpoint. Timed from the sweep's PUT to the moment it reads
Completed (polled every 20 ms); a 4-trial sweep first warms the page cache. Then the same sweep
with a light trial that logs the metric through MLflow's REST API with the standard library
(``import mlflow`` alone takes ~4 s here): what the sweep costs per trial. Per trial, from the
trials' own times: how long its process ran, and the slots' idle time (2 × wall − Σ runtimes)
spread over the trials — what the sweep adds per trial beyond the trial itself.

Ray Tune (``bench/_ray_tune_peer.py`` under a separate interpreter with ``ray[tune]``): the same N
trials, 2 at a time on ``ray.init(num_cpus=2)``, as function trainables (Tune's own, in a worker)
and as the very command cloudlet's trials run (a subprocess per trial).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench import _results
from bench._server import REPO_ROOT, kill_node_processes, start_cloudlet

NAME = "sweep_trials"
CLUSTER = "bench-sweep"
NODES = 2
TRIAL_CODE = "import sys, mlflow; mlflow.log_metric('loss', (float(sys.argv[1]) - 0.3) ** 2)"
# The same metric through MLflow's REST API with the standard library (no 4 s `import mlflow`):
# what the sweep itself costs per trial, beside Ray Tune's function trainables.
LIGHT_TRIAL_CODE = (
    "import json, os, sys, time, urllib.request; "
    "body = json.dumps({'run_id': os.environ['MLFLOW_RUN_ID'], 'key': 'loss', "
    "'value': (float(sys.argv[1]) - 0.3) ** 2, 'timestamp': int(time.time() * 1000), 'step': 0}).encode(); "
    "urllib.request.urlopen(urllib.request.Request("
    "os.environ['MLFLOW_TRACKING_URI'] + '/api/2.0/mlflow/runs/log-metric', body, "
    "{'Content-Type': 'application/json', 'Authorization': 'Bearer ' + os.environ['MLFLOW_TRACKING_TOKEN']}"
    ")).read()"
)
RAY_VERSION = "2.60.0"
RAY_TUNE_VENV = Path("/tmp/cloudlet-bench-ray-tune")
TIMEOUT_S = 900.0


def _sweep(trials: int, code: str) -> dict[str, Any]:
    return {
        "type": "sweep",
        "trial": {"command": f'python -c "{code}" ${{{{search_space.x}}}}'},
        "compute": f"azureml:{CLUSTER}",
        "sampling_algorithm": {"type": "random", "seed": 1},
        "search_space": {"x": {"type": "uniform", "min_value": 0.0, "max_value": 1.0}},
        "objective": {"goal": "minimize", "primary_metric": "loss"},
        "limits": {"max_total_trials": trials, "max_concurrent_trials": NODES},
    }


def _wait(client: httpx.Client, url: str, done: Any, what: str, poll: float = 0.02) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        found = done(client.get(url).json())
        if found:
            return found
        time.sleep(poll)
    raise RuntimeError(f"timed out waiting for {what}")


def _ts(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() if text else None


def _run_sweep(client: httpx.Client, ws: str, name: str, trials: int, code: str) -> dict[str, Any]:
    began = time.monotonic()
    response = client.put(f"{ws}/jobs/{name}", json=_sweep(trials, code))
    if response.status_code not in (200, 201):
        raise RuntimeError(f"sweep refused: {response.text}")
    job = _wait(
        client,
        f"{ws}/jobs/{name}",
        lambda j: j if j["status"] in ("Completed", "Failed", "Canceled") else None,
        f"sweep {name}",
    )
    wall = time.monotonic() - began
    kids = client.get(f"{ws}/jobs", params={"parent": name, "$top": 1000}).json()["value"]
    runtimes = [
        end - start
        for kid in kids
        if (start := _ts(kid.get("start_time"))) is not None and (end := _ts(kid.get("end_time"))) is not None
    ]
    idle = max(NODES * wall - sum(runtimes), 0.0)
    return {
        "status": job["status"],
        "status_message": job["status_message"],
        "trials": len(kids),
        "completed": sum(1 for kid in kids if kid["status"] == "Completed"),
        "seconds": wall,
        "trials_per_s": len(kids) / wall,
        "trial_runtime_p50_s": statistics.median(runtimes) if runtimes else None,
        "overhead_per_trial_s": idle / len(kids) if kids else None,
    }


def _cloudlet(trials: int, tmp: Path) -> dict[str, Any]:
    home = tmp / "home"
    server = start_cloudlet(home)
    try:
        with httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=60) as client:
            ws = server.ws_path
            body = {
                "type": "amlcompute",
                "size": "Standard_DS3_v2",
                "min_instances": NODES,
                "max_instances": NODES,
                "idle_time_before_scale_down": 600,
            }
            created = client.put(f"{ws}/computes/{CLUSTER}", json=body)
            if created.status_code not in (200, 201):
                raise RuntimeError(f"cluster refused: {created.text}")
            _wait(
                client,
                f"{ws}/computes/{CLUSTER}/nodes",
                lambda b: [n for n in b["nodes"] if n["nodeState"] == "idle"][NODES - 1 :],
                "2 idle nodes",
                poll=0.2,
            )
            warm = _run_sweep(client, ws, "warm-up", 4, TRIAL_CODE)
            print(f"   cloudlet warm-up: {warm['status']} in {warm['seconds']:.1f} s", flush=True)
            out = _run_sweep(client, ws, "timed", trials, TRIAL_CODE)
            out["warm_up"] = warm
            print("   cloudlet, light trials ...", flush=True)
            out["light"] = _run_sweep(client, ws, "light", trials, LIGHT_TRIAL_CODE)
        if server.process.poll() is not None:
            raise RuntimeError(f"the cloudlet server exited ({server.process.returncode}) mid-benchmark")
        return out
    finally:
        server.stop()
        kill_node_processes(home)


def _ray_tune_python() -> tuple[Path | None, str]:
    """$BENCH_RAY_TUNE_PYTHON, else RAY_TUNE_VENV (made with ``pip install ray[tune] mlflow-skinny``
    unless BENCH_RAY_INSTALL=0). (None, why) if none."""
    explicit = os.environ.get("BENCH_RAY_TUNE_PYTHON")
    if explicit:
        found = Path(explicit)
        return (found, "BENCH_RAY_TUNE_PYTHON") if found.exists() else (None, f"{explicit} missing")
    python = RAY_TUNE_VENV / "bin" / "python"
    probe = [str(python), "-c", "import ray.tune, mlflow"]
    if python.exists() and subprocess.run(probe, capture_output=True, timeout=120).returncode == 0:
        return python, f"existing venv {RAY_TUNE_VENV}"
    if os.environ.get("BENCH_RAY_INSTALL", "1") == "0":
        return None, f"no Ray Tune venv at {RAY_TUNE_VENV} and BENCH_RAY_INSTALL=0"
    print(f"   installing ray[tune]=={RAY_VERSION} into {RAY_TUNE_VENV} ...", flush=True)
    try:
        subprocess.run(["python3.11", "-m", "venv", str(RAY_TUNE_VENV)], check=True, timeout=120)
        pip = [
            str(RAY_TUNE_VENV / "bin" / "pip"),
            "install",
            "-q",
            f"ray[tune]=={RAY_VERSION}",
            "mlflow-skinny",
        ]
        subprocess.run(pip, check=True, timeout=900, capture_output=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"pip install ray[tune] failed: {exc}"
    if subprocess.run(probe, capture_output=True, timeout=120).returncode != 0:
        return None, "ray[tune] installed but does not import"
    return python, f"installed into {RAY_TUNE_VENV}"


def _ray_tune(trials: int, tmp: Path) -> dict[str, Any]:
    python, how = _ray_tune_python()
    if python is None:
        return {"skipped": how}
    out_path, log = tmp / "ray-tune.json", tmp / "ray-tune.log"
    cmd = [
        str(python),
        str(Path(__file__).with_name("_ray_tune_peer.py")),
        str(out_path),
        f"--trials={trials}",
        f"--concurrent={NODES}",
        f"--python={sys.executable}",  # the interpreter cloudlet's trials run (the nodes' Python)
        f"--trial-code={TRIAL_CODE}",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    try:
        with open(log, "wb") as fh:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {"skipped": "the Ray Tune peer ran past its deadline", "how": how}
    if not out_path.exists():
        return {
            "skipped": f"the Ray Tune peer wrote nothing (exit {proc.returncode})",
            "log": log.read_text()[-2000:],
        }
    data: dict[str, Any] = json.loads(out_path.read_text())
    data["interpreter"] = how
    if proc.returncode:
        data["log_tail"] = log.read_text(errors="replace")[-2000:]
    return data


def run(quick: bool = False) -> dict[str, Any]:
    trials = 10 if quick else 50
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {
        "trials": trials,
        "nodes": NODES,
        "quick": quick,
        "trial_code": TRIAL_CODE,
        "light_trial_code": LIGHT_TRIAL_CODE,
    }
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-sweep-"))
    try:
        print("   cloudlet ...", flush=True)
        data["cloudlet"] = _cloudlet(trials, tmp)
        data["loadavg_before_ray"] = _results.loadavg()
        print("   ray tune ...", flush=True)
        data["ray_tune"] = _ray_tune(trials, tmp)
        data["loadavg_end"] = _results.loadavg()
        return data
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    c, r = data["cloudlet"], data["ray_tune"]
    quick = "; --quick" if data["plan"]["quick"] else ""
    rows = [
        f"## sweep_trials — {data['timestamp']}",
        "",
        f"Machine: {data['machine']['nproc']} usable CPUs; load average {data.get('loadavg_start')} at "
        f"start, {data.get('loadavg_end')} at end; {data['plan']['trials']} trials, 2 at a time{quick}. "
        "Trial: a new Python that logs one metric (with the MLflow client, or its REST API).",
        "",
        "| sweep of the same trials, 2 at a time | trials | seconds | trials/s | trial runtime p50 s | "
        "overhead per trial s |",
        "|---|---:|---:|---:|---:|---:|",
        f"| cloudlet sweep job, MLflow client trials (2 nodes; {c['status']}) | {c['trials']} | "
        f"{f(c['seconds'])} | {f(c['trials_per_s'])} | {f(c['trial_runtime_p50_s'])} | "
        f"{f(c['overhead_per_trial_s'])} |",
    ]
    light = c.get("light")
    if light:
        rows.append(
            f"| cloudlet sweep job, REST trials (stdlib, no `import mlflow`; {light['status']}) | "
            f"{light['trials']} | {f(light['seconds'])} | {f(light['trials_per_s'])} | "
            f"{f(light['trial_runtime_p50_s'])} | {f(light['overhead_per_trial_s'])} |"
        )
    if "skipped" in r or "error" in r:
        rows.append(f"| Ray Tune | — | — | — | — | — ({r.get('skipped') or r.get('error')}) |")
    else:
        for label, key in (
            ("Ray Tune, the MLflow client trial as a subprocess", "subprocess"),
            ("Ray Tune, function trainable", "function"),
        ):
            t = r[key]
            rows.append(
                f"| {label} (Ray {r['ray_version']}, num_cpus 2) | {t['trials']} | {f(t['seconds'])} | "
                f"{f(t['trials_per_s'])} | — | — |"
            )
    return "\n".join(rows) + "\n"


def report(data: dict[str, Any]) -> str:
    c, r = data["cloudlet"], data["ray_tune"]
    lines = [f"cloudlet: {c['trials']} trials in {c['seconds']:.1f} s = {c['trials_per_s']:.2f} trials/s"]
    if c.get("light"):
        light = c["light"]
        lines.append(
            f"cloudlet (REST trials): {light['trials']} in {light['seconds']:.1f} s = "
            f"{light['trials_per_s']:.2f}/s"
        )
    for key in ("subprocess", "function"):
        if key in r:
            t = r[key]
            lines.append(
                f"ray tune ({key}): {t['trials']} trials in {t['seconds']:.1f} s = {t['trials_per_s']:.2f}/s"
            )
    if "skipped" in r or "error" in r:
        lines.append(f"ray tune: {r.get('skipped') or r.get('error')}")
    return "\n".join(lines)
