"""Experiment tracking: the MLflow client logging to cloudlet (api/mlflow/) beside a real MLflow
tracking server (``mlflow server``, SQLite backend) in the same run.

Series, each through ``MlflowClient`` (the same client, the same process, one run per server):
``log_metric`` one value at a time (p50, p90), and ``log_batch`` of 1,000 metrics (p50). Rounds
alternate between the servers so background load lands on both. The peer is the ``mlflow``
executable of ``$CLOUDLET_BENCH_MLFLOW`` (default ``/tmp/mlflow-peer/bin/mlflow``: make it with
``uv venv /tmp/mlflow-peer && uv pip install --python /tmp/mlflow-peer/bin/python mlflow``);
without it cloudlet is measured alone and the report says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import _results
from bench._server import HOST, REPO_ROOT, start_cloudlet

NAME = "tracking"
PEER_DEFAULT = "/tmp/mlflow-peer/bin/mlflow"
BATCH = 1000
ARM_PROVIDER = "Microsoft.MachineLearningServices"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _start_peer(executable: str, root: Path, timeout: float = 90) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [
        executable,
        "server",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--default-artifact-root",
        str(root / "artifacts"),
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = open(root / "mlflow-server.log", "wb")  # noqa: SIM115 - the server's, closed with it
    process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"mlflow server exited early:\n{(root / 'mlflow-server.log').read_text()[-3000:]}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return process, url
        time.sleep(0.2)
    _stop(process)
    raise RuntimeError("mlflow server did not become ready")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)


def _stats(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1000,
        "mean_ms": statistics.fmean(ordered) * 1000,
    }


class _Target:
    def __init__(self, name: str, uri: str) -> None:
        from mlflow.tracking import MlflowClient

        self.name = name
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.create_experiment(f"bench-{time.time_ns()}")
        self.run_id = self.client.create_run(experiment).info.run_id
        self.metric: list[float] = []
        self.batch: list[float] = []
        self.step = 0

    def log_metrics(self, count: int) -> None:
        for _ in range(count):
            self.step += 1
            began = time.perf_counter()
            self.client.log_metric(self.run_id, "loss", 1.0 / self.step, step=self.step)
            self.metric.append(time.perf_counter() - began)

    def log_batches(self, count: int) -> None:
        from mlflow.entities import Metric

        for _ in range(count):
            stamp = int(time.time() * 1000)
            metrics = [Metric(f"m{i % 50}", float(i), stamp, self.step * BATCH + i) for i in range(BATCH)]
            self.step += 1
            began = time.perf_counter()
            self.client.log_batch(self.run_id, metrics=metrics)
            self.batch.append(time.perf_counter() - began)


def run(quick: bool = False) -> dict[str, Any]:
    rounds, metrics_per_round, batches_per_round = (2, 50, 3) if quick else (4, 200, 10)
    data = _results.envelope(NAME, REPO_ROOT)
    data["plan"] = {
        "rounds": rounds,
        "log_metric_per_round": metrics_per_round,
        "log_batch_per_round": batches_per_round,
        "batch_size": BATCH,
        "quick": quick,
    }
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-tracking-"))
    server = start_cloudlet(tmp / "home")
    peer: subprocess.Popen[bytes] | None = None
    executable = os.environ.get("CLOUDLET_BENCH_MLFLOW", PEER_DEFAULT)
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_HTTP_REQUEST_MAX_RETRIES")}
    try:
        # The peer has no authentication: it ignores the header, so both get the same requests.
        os.environ["MLFLOW_TRACKING_TOKEN"] = server.api_key
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
        ws = f"/subscriptions/{server.subscription_id}/resourceGroups/default/providers/{ARM_PROVIDER}"
        cloudlet_uri = f"{server.endpoint}/mlflow/v1.0{ws}/workspaces/default"
        targets = [_Target("cloudlet", cloudlet_uri)]
        if shutil.which(executable) or Path(executable).exists():
            (tmp / "peer").mkdir()
            peer, peer_url = _start_peer(executable, tmp / "peer")
            targets.append(_Target("mlflow_server", peer_url))
            data["peer"] = {"executable": executable, "version": _version(executable)}
        else:
            data["peer"] = None
        for target in targets:  # warm-up, discarded
            target.log_metrics(20)
            target.log_batches(1)
            target.metric.clear()
            target.batch.clear()
        for number in range(rounds):
            order = targets if number % 2 == 0 else list(reversed(targets))
            for target in order:
                target.log_metrics(metrics_per_round)
                target.log_batches(batches_per_round)
        data["series"] = {
            t.name: {"log_metric": _stats(t.metric), "log_batch_1000": _stats(t.batch)} for t in targets
        }
        data["rss_kib"] = {"cloudlet": server.rss_kib()}
        if len(targets) == 2:
            c, p = data["series"]["cloudlet"], data["series"]["mlflow_server"]
            data["ratios"] = {
                "log_metric_p50_cloudlet_over_peer": c["log_metric"]["p50_ms"] / p["log_metric"]["p50_ms"],
                "log_batch_p50_cloudlet_over_peer": c["log_batch_1000"]["p50_ms"]
                / p["log_batch_1000"]["p50_ms"],
            }
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if peer is not None:
            _stop(peer)
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    data["loadavg_end"] = _results.loadavg()
    return data


def _version(executable: str) -> str:
    out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    machine, plan = data["machine"], data["plan"]
    quick = "; --quick" if plan["quick"] else ""
    peer = data.get("peer")
    rows = [
        f"## tracking — {data['timestamp']}",
        "",
        f"Machine: {machine['nproc']} usable CPUs, Python {machine['python']}; load average "
        f"{data.get('loadavg_start')} at start, {data.get('loadavg_end')} at end; {plan['rounds']} rounds × "
        f"({plan['log_metric_per_round']} log_metric + {plan['log_batch_per_round']} log_batch of "
        f"{plan['batch_size']}) per server{quick}. Peer: {peer['version'] if peer else 'not installed'} "
        "(`mlflow server`, SQLite backend, 1 worker). Client: `MlflowClient` (mlflow-skinny) in one process.",
        "",
        "| series | server | p50 ms | p90 ms | mean ms |",
        "|---|---|---:|---:|---:|",
    ]
    for name, series in data["series"].items():
        for key, s in series.items():
            rows.append(f"| {key} | {name} | {f(s['p50_ms'])} | {f(s['p90_ms'])} | {f(s['mean_ms'])} |")
    if data.get("ratios"):
        r = data["ratios"]
        rows += [
            "",
            f"cloudlet / MLflow server, p50: log_metric {f(r['log_metric_p50_cloudlet_over_peer'])}×, "
            f"log_batch of 1,000 {f(r['log_batch_p50_cloudlet_over_peer'])}×.",
        ]
    return "\n".join(rows) + "\n"


def report(data: dict[str, Any]) -> str:
    lines = []
    for name, series in data["series"].items():
        m, b = series["log_metric"], series["log_batch_1000"]
        lines.append(f"{name}: log_metric p50 {m['p50_ms']:.2f} ms, log_batch(1000) p50 {b['p50_ms']:.2f} ms")
    if data.get("ratios"):
        r = data["ratios"]
        lines.append(
            f"cloudlet/peer p50: log_metric {r['log_metric_p50_cloudlet_over_peer']:.2f}x, "
            f"log_batch {r['log_batch_p50_cloudlet_over_peer']:.2f}x"
        )
    return "\n".join(lines)
