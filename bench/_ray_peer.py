"""Ray peer for the ``dispatch`` benchmark; runs under a separate interpreter that has Ray installed.

``PYTHON bench/_ray_peer.py OUT.json --task-latency N --task-throughput N --jobs-latency N
--jobs-throughput N --deadline S``

Starts a local head node (``ray start --head --block``, loopback, its own session and temp dir),
then measures, against that one head:

* Ray tasks (``@ray.remote(num_cpus=1)``): submit -> task start latency, one at a time (the task
  returns ``time.time()`` as its first statement; latency = that minus the driver's wall time just
  before ``.remote()``), and tiny-task throughput (N no-op tasks submitted at once, ``ray.get`` all);
* the Ray Jobs API (``JobSubmissionClient.submit_job(entrypoint="date +%s.%N")``, the same payload
  cloudlet's jobs run): submit -> process start from the timestamp in the job's logs, one at a time,
  and jobs/s for N jobs submitted as fast as possible (until every one has ended).

Everything is bounded by ``--deadline``; the head and every process it started (found by walking the
process tree from the ``ray start`` process, pid + start time checked before each kill) are
stopped on exit. Writes a JSON document to OUT.json; never imports cloudlet.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
PAYLOAD = "date +%s.%N"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, start time in clock ticks) of PID, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rpartition(")")[2].split()
    return int(fields[1]), int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live descendant of ROOT (and ROOT itself)."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None:
                table[int(entry)] = st
    found: dict[int, int] = {}
    if root in table:
        found[root] = table[root][1]
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, start) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = start
                frontier.append(pid)
    return found


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _cmd_name(pid: int) -> str:
    """A short label for a Ray process: raylet, gcs_server, a ``ray::`` worker/actor title, or the
    Python script it runs."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    if text.startswith("ray::"):
        return text.split()[0].split("(")[0]
    for word in text.split()[:4]:
        base = os.path.basename(word)
        if base in ("gcs_server", "raylet") or base.endswith(".py"):
            return base
    if "default_worker.py" in text or "setup_worker" in text:
        return "worker"
    return os.path.basename(text.split()[0])[:30] if text else "?"


def _kill_tree(known: dict[int, int]) -> int:
    """SIGKILL every pid in KNOWN whose start time still matches (so a reused pid is left alone)."""
    killed = 0
    for pid, start in known.items():
        st = _stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _summ(values_s: list[float]) -> dict[str, Any]:
    ms = sorted(v * 1000 for v in values_s)
    if not ms:
        return {"count": 0}

    def pct(q: float) -> float:
        if len(ms) == 1:
            return ms[0]
        pos = (len(ms) - 1) * q / 100
        low = int(pos)
        high = min(low + 1, len(ms) - 1)
        return ms[low] * (1 - (pos - low)) + ms[high] * (pos - low)

    return {
        "count": len(ms),
        "p50_ms": round(pct(50), 3),
        "p90_ms": round(pct(90), 3),
        "p99_ms": round(pct(99), 3),
        "min_ms": round(ms[0], 3),
        "max_ms": round(ms[-1], 3),
        "mean_ms": round(sum(ms) / len(ms), 3),
    }


def _wait_dashboard(url: str, head: subprocess.Popen[bytes], deadline: float) -> None:
    while time.monotonic() < deadline:
        if head.poll() is not None:
            raise RuntimeError(f"ray start exited with {head.returncode}")
        try:
            with urllib.request.urlopen(url + "/api/version", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError("the Ray dashboard (Jobs API) did not come up in time")


def _tasks(address: str, n_latency: int, n_throughput: int, deadline: float) -> dict[str, Any]:
    import ray

    ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    try:

        @ray.remote(num_cpus=1)
        def started() -> float:
            return time.time()

        @ray.remote(num_cpus=1)
        def noop() -> None:
            return None

        ray.get([started.remote() for _ in range(20)], timeout=120)  # warm the worker pool
        lat: list[float] = []
        for _ in range(n_latency):
            if time.monotonic() > deadline:
                break
            t0 = time.time()
            ts = ray.get(started.remote(), timeout=30)
            lat.append(ts - t0)
        ray.get([noop.remote() for _ in range(50)], timeout=120)
        left = max(10.0, deadline - time.monotonic())
        t0 = time.perf_counter()
        refs = [noop.remote() for _ in range(n_throughput)]
        submit_s = time.perf_counter() - t0
        ready, not_ready = ray.wait(refs, num_returns=len(refs), timeout=left)
        wall = time.perf_counter() - t0
        return {
            "latency": _summ(lat),
            "throughput": {
                "count": len(refs),
                "completed": len(ready),
                "timed_out": bool(not_ready),
                "submit_s": round(submit_s, 4),
                "wall_s": round(wall, 4),
                "jobs_per_s": round(len(ready) / wall, 2) if wall > 0 else None,
            },
            "num_cpus": ray.cluster_resources().get("CPU"),
        }
    finally:
        ray.shutdown()


TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def _job_start_ts(logs: str) -> float | None:
    for line in logs.splitlines():
        try:
            return float(line.strip())
        except ValueError:
            continue
    return None


def _jobs(url: str, n_latency: int, n_throughput: int, deadline: float) -> dict[str, Any]:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(url)

    def wait(sid: str, until: float) -> str:
        status = "PENDING"
        while time.monotonic() < until:
            status = str(client.get_job_status(sid).value)
            if status in TERMINAL:
                return status
            time.sleep(0.02)
        return status

    warm = client.submit_job(entrypoint=PAYLOAD)  # first job: warms the dashboard's job manager
    wait(warm, time.monotonic() + 120)
    lat: list[float] = []
    failures: list[str] = []
    for _ in range(n_latency):
        if time.monotonic() > deadline:
            break
        t0 = time.time()
        sid = client.submit_job(entrypoint=PAYLOAD)
        status = wait(sid, min(deadline, time.monotonic() + 60))
        ts = _job_start_ts(client.get_job_logs(sid)) if status == "SUCCEEDED" else None
        if ts is None:
            failures.append(f"{sid}: {status}")
            continue
        lat.append(ts - t0)
    t_first = time.time()
    sids = [client.submit_job(entrypoint=PAYLOAD) for _ in range(n_throughput)]
    submit_s = time.time() - t_first
    pending = set(sids)
    while pending and time.monotonic() < deadline:
        for sid in list(pending):
            if str(client.get_job_status(sid).value) in TERMINAL:
                pending.discard(sid)
        time.sleep(0.1)
    ends = []
    for sid in sids:
        info = client.get_job_info(sid)
        if info.end_time:
            ends.append(info.end_time / 1000.0)
    wall = (max(ends) - t_first) if ends else None
    return {
        "latency": _summ(lat),
        "latency_failures": failures[:5],
        "throughput": {
            "count": len(sids),
            "completed": len(ends),
            "timed_out": bool(pending),
            "submit_s": round(submit_s, 4),
            "wall_s": round(wall, 4) if wall else None,
            "jobs_per_s": round(len(ends) / wall, 3) if wall else None,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--task-latency", type=int, default=100)
    parser.add_argument("--task-throughput", type=int, default=1000)
    parser.add_argument("--jobs-latency", type=int, default=20)
    parser.add_argument("--jobs-throughput", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=300)
    args = parser.parse_args()
    deadline = time.monotonic() + args.deadline
    import ray

    out: dict[str, Any] = {"ray_version": ray.__version__, "python": sys.version.split()[0]}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-ray-", dir="/tmp"))
    port, dport = _free_port(), _free_port()
    ray_bin = str(Path(sys.executable).parent / "ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [
        ray_bin,
        "start",
        "--head",
        "--block",
        f"--node-ip-address={HOST}",
        f"--port={port}",
        "--include-dashboard=true",
        f"--dashboard-host={HOST}",
        f"--dashboard-port={dport}",
        f"--temp-dir={tmp}",
        "--disable-usage-stats",
    ]
    head: subprocess.Popen[bytes] | None = None
    known: dict[int, int] = {}
    try:
        with open(tmp / "ray-start.log", "wb") as log:
            t0 = time.perf_counter()
            head = subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        url = f"http://{HOST}:{dport}"
        _wait_dashboard(url, head, min(deadline, time.monotonic() + 120))
        out["head_start_s"] = round(time.perf_counter() - t0, 3)
        known.update(_descendants(head.pid))
        try:
            out["tasks"] = _tasks(f"{HOST}:{port}", args.task_latency, args.task_throughput, deadline)
        except Exception as exc:
            out["tasks_error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        known.update(_descendants(head.pid))
        try:
            out["jobs"] = _jobs(url, args.jobs_latency, args.jobs_throughput, deadline)
        except Exception as exc:
            out["jobs_error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        tree = _descendants(head.pid)
        known.update(tree)
        rss = {pid: _rss_kib(pid) or 0 for pid in tree}
        by_name: dict[str, int] = {}
        for pid, kib in rss.items():
            name = _cmd_name(pid)
            by_name[name] = by_name.get(name, 0) + kib
        out["rss_kib"] = {"total": sum(rss.values()), "processes": len(rss), "by_process": by_name}
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    finally:
        if head is not None:
            known.update(_descendants(head.pid))
            if head.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(head.pid, signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    head.wait(timeout=15)
            out["killed_leftovers"] = _kill_tree(known)
            if head.poll() is None:
                head.kill()
                head.wait(timeout=5)
        shutil.rmtree(tmp, ignore_errors=True)
        Path(args.out).write_text(json.dumps(out, indent=2))
    return 0 if "error" not in out else 1


if __name__ == "__main__":
    sys.exit(main())
