"""Compute instances: create → JupyterLab ready, and start (after stop) → JupyterLab ready.

Each rep creates an instance and waits for its operation (which ends only once the node's agent
registered and JupyterLab answers), then checks JupyterLab through the proxy; then it stops the
instance and times a start the same way; then deletes it. Times are wall-clock seconds from the
request to the first 200 from ``/instances/<name>/jupyterlab/api/status``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import _results
from bench._server import REPO_ROOT, ServerProcess, start_cloudlet, unmount_under

NAME = "instances"
INSTANCE = {"type": "computeinstance", "size": "Standard_DS3_v2"}
TIMEOUT_S = 300.0


def _wait_op(client: httpx.Client, url: str) -> dict[str, Any]:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(url).json()
        if body["status"] != "InProgress":
            if body["status"] != "Succeeded":
                raise RuntimeError(f"operation failed: {body}")
            return body
        time.sleep(0.02)
    raise RuntimeError(f"operation {url} did not finish in {TIMEOUT_S:g} s")


def _timed(client: httpx.Client, server: ServerProcess, name: str, request: httpx.Response) -> float:
    """Seconds from the request until JupyterLab answers through the proxy."""
    began = time.monotonic() - request.elapsed.total_seconds()
    assert request.status_code in (200, 201, 202), request.text
    _wait_op(client, request.headers["Operation-Location"])
    status = f"{server.endpoint}/instances/{name}/jupyterlab/api/status"
    while client.get(status).status_code != 200:
        if time.monotonic() - began > TIMEOUT_S:
            raise RuntimeError(f"JupyterLab of {name} did not answer")
        time.sleep(0.02)
    return time.monotonic() - began


def _reap(installation: str) -> None:
    """End every process this run's server started (agents outlive a stopped server by design)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            if f"CLOUDLET_INSTALLATION={installation}".encode() in environ.split(b"\0"):
                os.kill(int(entry), signal.SIGKILL)


def run(quick: bool = False) -> dict[str, Any]:
    reps = 2 if quick else 5
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {"reps": reps, "quick": quick, "size": INSTANCE["size"]}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-instances-"))
    server = start_cloudlet(tmp / "home")
    create_s: list[float] = []
    start_s: list[float] = []
    try:
        installation = httpx.get(server.endpoint + "/healthz").json()["installation"]
        with httpx.Client(base_url=server.endpoint, headers=server.headers(), timeout=60) as client:
            for rep in range(reps):
                name = f"bench-ci{rep}"
                url = f"{server.ws_path}/computes/{name}"
                create_s.append(_timed(client, server, name, client.put(url, json=INSTANCE)))
                _wait_op(client, client.post(url + "/stop").headers["Operation-Location"])
                start_s.append(_timed(client, server, name, client.post(url + "/start")))
                _wait_op(client, client.delete(url).headers["Operation-Location"])
    finally:
        server.stop()
        with contextlib.suppress(Exception):
            _reap(installation)
        unmount_under(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    data["create_to_jupyterlab_s"] = _summary(create_s)
    data["start_after_stop_to_jupyterlab_s"] = _summary(start_s)
    data["loadavg_end"] = _results.loadavg()
    return data


def _summary(values: list[float]) -> dict[str, Any]:
    return {
        "p50": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "all": [round(v, 3) for v in values],
    }


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    machine = data["machine"]
    quick = "; --quick" if data["plan"]["quick"] else ""
    rows = [
        f"## instances — {data['timestamp']}",
        "",
        f"Machine: {machine['nproc']} usable CPUs, Python {machine['python']}; load average "
        f"{data.get('loadavg_start')} at start, {data.get('loadavg_end')} at end; "
        f"{data['plan']['reps']} reps of {data['plan']['size']}{quick}.",
        "",
        "| from request to JupyterLab answering through the proxy | p50 s | min s | max s |",
        "|---|---:|---:|---:|",
    ]
    for label, key in (
        ("create", "create_to_jupyterlab_s"),
        ("start after stop", "start_after_stop_to_jupyterlab_s"),
    ):
        s = data[key]
        rows.append(f"| {label} | {f(s['p50'])} | {f(s['min'])} | {f(s['max'])} |")
    return "\n".join(rows) + "\n"


def report(data: dict[str, Any]) -> str:
    c, s = data["create_to_jupyterlab_s"], data["start_after_stop_to_jupyterlab_s"]
    return (
        f"create → JupyterLab: p50 {c['p50']:.2f} s (all {c['all']})\n"
        f"start after stop → JupyterLab: p50 {s['p50']:.2f} s (all {s['all']})"
    )
