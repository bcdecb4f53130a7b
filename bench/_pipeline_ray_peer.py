"""Ray peer for the ``pipeline_handoff`` benchmark: the same two-step flow as Ray tasks.

``PYTHON bench/_pipeline_ray_peer.py OUT.json --flows N --deadline S`` (under an interpreter with
Ray: ``bench.dispatch.ray_python()``; never imports cloudlet).

Step ``a`` is a task that runs its command as a process (``true``) and returns the time it was
done; step ``b`` takes ``a``'s result (so Ray starts it only once ``a`` has finished) and runs its
command as a process, ``date +%s.%N``, whose output is when that process started — the same two
instants cloudlet's benchmark reads (a step done → the next step's process started). ``b`` also
records when the task itself began (Ray runs it in an already started worker: the floor).

Local Ray (``ray.init``, 2 CPUs, no dashboard, its own temp dir), shut down on exit.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _summ(values_s: list[float]) -> dict[str, Any]:
    ms = sorted(v * 1000 for v in values_s)
    if not ms:
        return {"n": 0}

    def pct(q: float) -> float:
        return round(ms[min(len(ms) - 1, int(q * len(ms)))], 3)

    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 3),
        "p90_ms": pct(0.9),
        "max_ms": round(ms[-1], 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--flows", type=int, default=30)
    parser.add_argument("--deadline", type=float, default=240)
    args = parser.parse_args()
    deadline = time.monotonic() + args.deadline
    import ray

    out: dict[str, Any] = {"ray_version": ray.__version__, "python": sys.version.split()[0]}
    tmp = Path(tempfile.mkdtemp(prefix="cloudlet-bench-pipe-ray-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(tmp), log_to_driver=False)
        out["init_s"] = round(time.perf_counter() - t0, 3)

        @ray.remote(num_cpus=1)
        def step_a() -> float:
            subprocess.run(["true"], check=True)
            return time.time()

        @ray.remote(num_cpus=1)
        def step_b(a_done: float) -> tuple[float, float, float]:
            began = time.time()
            started = float(subprocess.run(["date", "+%s.%N"], capture_output=True, text=True).stdout)
            return a_done, began, started

        ray.get(step_b.remote(step_a.remote()))  # warm the workers
        to_process: list[float] = []
        to_task: list[float] = []
        for _ in range(args.flows):
            if time.monotonic() > deadline:
                out["stopped_early"] = "deadline"
                break
            a_done, began, started = ray.get(step_b.remote(step_a.remote()))
            to_process.append(started - a_done)
            to_task.append(began - a_done)
        out["handoff_to_process"] = _summ(to_process)
        out["handoff_to_task"] = _summ(to_task)
    except Exception as exc:  # reported, not raised: the benchmark shows why the peer is missing
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            ray.shutdown()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            Path(args.out).write_text(json.dumps(out, indent=2))
    return 0 if "error" not in out else 1


if __name__ == "__main__":
    sys.exit(main())
