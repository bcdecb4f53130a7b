"""Ray peer for the ``ssh_join`` benchmark (runs under an interpreter with Ray; never imports cloudlet).

``PYTHON bench/_ray_join_peer.py OUT.json --head-ip IP --namespace NS --worker-ip IP --reps N``

Starts a Ray head on ``--head-ip`` (the bridge of tests/netns_hosts.py, free ports of its own), then
N times: starts a Ray worker inside network namespace NS (``ip netns exec NS ray start --address …``),
times until the head lists a new node of that address alive (join), then submits a task pinned to
it (a custom resource) and times until its result is back (first task; the task's own start stamp
is kept too), then stops the worker and waits for the head to see it dead. Writes
``{"join_s": [...], "first_task_s": [...], "first_task_start_s": [...], ...}`` to OUT.json; on a
failure also ``error``, the traceback and the tails of the Ray logs that say why.

Authentication: Ray turns token authentication on for ``ray start --head`` whenever a token file
``~/.ray/auth_token`` exists (any local ``ray.init()`` on the machine writes one), but a driver or
worker given an explicit address never turns it on by itself. Its requests then carry no token, the
GCS refuses them ("Missing authorization header in request!" in gcs_server.out) and ``ray.init``
fails with "Failed to connect to Ray cluster at …": why this peer produced no number before. So
every Ray process here gets the same explicit setting, token mode with a token of this run's own
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN``), set before Ray is imported.
"""

from __future__ import annotations

import os
import secrets

# Before Ray is imported (it reads its config from the environment): see "Authentication" above.
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import argparse
import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import ray

OBJECT_STORE_BYTES = 100_000_000  # two nodes on one machine: keep /dev/shm use small
HEAD_UP_S = 180.0
JOIN_S = 120.0
TASK_S = 120.0
GONE_S = 90.0


def _ray_bin() -> str:
    return str(Path(sys.executable).with_name("ray"))


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 15, only_errors: bool = False) -> list[str]:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    if only_errors:
        text = [line for line in text if " E " in line or " C " in line or "Error" in line]
    return [line[:400] for line in text[-lines:]]


def _diagnostics(temp: Path, logs: Path) -> dict[str, list[str]]:
    """Tails of the ``ray start`` outputs and the errors in the session's logs."""
    found: dict[str, list[str]] = {}
    for log in sorted(logs.glob("*.log")):
        found[log.name] = _tail(log)
    session_logs = temp / "session_latest" / "logs"
    for name in ("gcs_server.out", "gcs_server.err", "raylet.err", "raylet.out", "dashboard_agent.log"):
        got = _tail(session_logs / name, 10, only_errors=True)
        if got:
            found[f"session/{name}"] = got
    return found


def _nodes_at(address: str) -> dict[str, bool]:
    """NodeID -> alive, for every node the head knows at ``address``."""
    return {n["NodeID"]: bool(n["Alive"]) for n in ray.nodes() if n["NodeManagerAddress"] == address}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--head-ip", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--worker-ip", required=True)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    temp = Path(tempfile.mkdtemp(prefix="ray-join-"))
    logs = Path(tempfile.mkdtemp(prefix="ray-join-logs-"))
    port = _free_port(args.head_ip)
    address = f"{args.head_ip}:{port}"
    head = [_ray_bin(), "start", "--head", f"--node-ip-address={args.head_ip}", f"--port={port}"]
    head += [f"--ray-client-server-port={_free_port(args.head_ip)}"]
    head += [f"--dashboard-agent-listen-port={_free_port(args.head_ip)}"]
    head += ["--num-cpus=1", "--include-dashboard=false", f"--temp-dir={temp}", "--disable-usage-stats"]
    head += [f"--object-store-memory={OBJECT_STORE_BYTES}", "--block"]
    out: dict[str, Any] = {
        "join_s": [],
        "first_task_s": [],
        "first_task_start_s": [],
        "ray_version": ray.__version__,
        "auth_mode": "token",
        "gcs_address": address,
        "worker": {"namespace": args.namespace, "address": args.worker_ip},
    }
    # Every Ray process runs in a session of its own and is stopped by its group: `ray stop` would
    # stop every Ray process of the machine (namespaces share the pid space), other people's too.
    started: list[subprocess.Popen[bytes]] = []

    def launch(argv: list[str], log_name: str) -> subprocess.Popen[bytes]:
        with open(logs / log_name, "ab") as log:
            proc = subprocess.Popen(
                argv,
                env=dict(os.environ),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started.append(proc)
        return proc

    def end(proc: subprocess.Popen[bytes]) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
                break

    ok = False
    try:
        head_proc = launch(head, "head.log")
        began = time.monotonic()
        while True:
            try:
                ray.init(address=address, log_to_driver=False, _node_ip_address=args.head_ip)
                break
            except Exception:
                if head_proc.poll() is not None:
                    raise RuntimeError(f"ray start --head exited with {head_proc.returncode}") from None
                if time.monotonic() - began > HEAD_UP_S:
                    raise
                time.sleep(0.5)
        out["head_up_s"] = time.monotonic() - began

        @ray.remote(num_cpus=0, resources={"peer_host": 1})
        def stamp() -> float:
            return time.time()

        for rep in range(args.reps):
            known = set(_nodes_at(args.worker_ip))
            worker = [
                *("ip", "netns", "exec", args.namespace, _ray_bin(), "start"),
                f"--address={address}",
                f"--node-ip-address={args.worker_ip}",
                "--num-cpus=1",
                '--resources={"peer_host": 1}',
                f"--object-store-memory={OBJECT_STORE_BYTES}",
                "--disable-usage-stats",
                "--block",
            ]
            began = time.monotonic()
            proc = launch(worker, f"worker-{rep}.log")
            node_id = None
            while node_id is None:
                node_id = next(
                    (i for i, alive in _nodes_at(args.worker_ip).items() if alive and i not in known), None
                )
                if node_id is None:
                    if proc.poll() is not None:
                        raise RuntimeError(f"the Ray worker's ray start exited with {proc.returncode}")
                    if time.monotonic() - began > JOIN_S:
                        raise RuntimeError(f"the Ray worker did not join within {JOIN_S:g} s")
                    time.sleep(0.02)
            out["join_s"].append(time.monotonic() - began)
            submitted_wall, submitted = time.time(), time.monotonic()
            task_started = ray.get(stamp.remote(), timeout=TASK_S)
            out["first_task_s"].append(time.monotonic() - submitted)
            out["first_task_start_s"].append(task_started - submitted_wall)
            end(proc)
            gone = time.monotonic()
            while _nodes_at(args.worker_ip).get(node_id, False):
                if time.monotonic() - gone > GONE_S:
                    raise RuntimeError(f"the head still lists the stopped worker alive after {GONE_S:g} s")
                time.sleep(0.2)
        ok = True
    except Exception as exc:  # reported, not raised: the benchmark records why
        out["error"] = repr(exc)
        out["traceback"] = traceback.format_exc().splitlines()[-25:]
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        for proc in reversed(started):
            end(proc)
        if not ok:
            out["diagnostics"] = _diagnostics(temp, logs)
            out["kept_for_debugging"] = [str(temp), str(logs)]
        Path(args.out).write_text(json.dumps(out, indent=1))
        if ok:
            shutil.rmtree(temp, ignore_errors=True)
            shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
