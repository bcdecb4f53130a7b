"""What per-run resource sampling (agent/monitor.py) costs the agent: CPU and resident memory of a
process holding the agent's code, with and without the sampler's thread, over the same window, while
it watches RUNS runs (each a small process tree: a shell and two sleepers).

    .venv/bin/python -m bench.agent_sampling [--runs 8] [--seconds 60] [--interval 5]

Each side runs in its own fresh process (the agent's modules imported, as ``python -m
cloudlet.agent`` has them). The sampler's cost per round is also timed directly over 200 rounds.
Targets (issue 29): at most 1 % of a core, the agent under 30 MB RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

NAME = "agent_sampling"
CHILD = "bench.agent_sampling"


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(mode: str, runs: int, seconds: float, interval: float) -> dict[str, Any]:
    """One side of the comparison, in this (fresh) process."""
    import cloudlet.agent.main  # noqa: F401  (the agent's code, as the agent process holds it)
    from cloudlet.agent.monitor import RunMonitor

    trees = [
        subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600 & wait"], start_new_session=True)
        for _ in range(runs)
    ]
    pairs = [(f"run-{i}", p.pid) for i, p in enumerate(trees)]
    try:
        monitor = RunMonitor(lambda: pairs, Path("."), interval)
        stop = threading.Event()
        per_round_ms = None
        if mode == "sampling":
            monitor.sample_once()
            began = time.process_time()
            for _ in range(200):
                monitor.sample_once()
                monitor.take()  # as the polls do: the buffer does not grow
            per_round_ms = (time.process_time() - began) / 200 * 1000
            threading.Thread(target=monitor.loop, args=(stop,), daemon=True).start()
        cpu0, wall0 = time.process_time(), time.monotonic()
        end = wall0 + seconds
        while time.monotonic() < end:
            time.sleep(min(1.0, end - time.monotonic()) if end > time.monotonic() else 0)
            monitor.take()
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        stop.set()
        return {
            "mode": mode,
            "cpu_percent_of_core": 100 * cpu / wall,
            "rss_mb": _rss_mb(),
            "per_round_ms": per_round_ms,
            "processes_on_host": sum(1 for e in os.scandir("/proc") if e.name.isdigit()),
        }
    finally:
        for p in trees:
            os.killpg(p.pid, 9)
            p.wait()


def measure(runs: int, seconds: float, interval: float) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": runs, "seconds": seconds, "interval_s": interval}
    for mode in ("baseline", "sampling"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                CHILD,
                "--child",
                mode,
                "--runs",
                str(runs),
                "--seconds",
                str(seconds),
                "--interval",
                str(interval),
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=seconds + 120,
        )
        out[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    sampling, baseline = out["sampling"], out["baseline"]
    out["sampling_cpu_percent_of_core"] = sampling["per_round_ms"] / 1000 / interval * 100
    out["window_cpu_difference_percent"] = sampling["cpu_percent_of_core"] - baseline["cpu_percent_of_core"]
    out["rss_difference_mb"] = sampling["rss_mb"] - baseline["rss_mb"]
    return out


def run(quick: bool) -> dict[str, Any]:
    """``python -m bench --only agent_sampling``: 8 runs, a 20 s window quick, 60 s full."""
    return measure(8, 20 if quick else 60, 5.0)


def markdown(data: dict[str, Any]) -> str:
    base, sampled = data["baseline"], data["sampling"]
    return "\n".join(
        [
            f"{data['runs']} runs sampled every {data['interval_s']:g} s, a {data['seconds']:g} s window "
            f"({sampled['processes_on_host']} processes on the host).",
            "",
            "| | without sampling | with sampling | target |",
            "|---|---|---|---|",
            f"| CPU over the window | {base['cpu_percent_of_core']:.3f} % of a core | "
            f"{sampled['cpu_percent_of_core']:.3f} % of a core | ≤ 1 % |",
            f"| one sampling round | — | {sampled['per_round_ms']:.1f} ms of CPU | — |",
            f"| resident memory | {base['rss_mb']:.2f} MB | {sampled['rss_mb']:.2f} MB | < 30 MB |",
        ]
    )


def report(data: dict[str, Any]) -> str:
    return (
        f"sampling: {data['sampling_cpu_percent_of_core']:.2f} % of a core by the timed round, "
        f"{data['window_cpu_difference_percent']:.2f} % over the window; "
        f"RSS {data['sampling']['rss_mb']:.1f} MB "
        f"({data['rss_difference_mb']:+.2f} MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--child", choices=("baseline", "sampling"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.runs, args.seconds, args.interval)))
        return
    print(json.dumps(measure(args.runs, args.seconds, args.interval), indent=2))


if __name__ == "__main__":
    main()
