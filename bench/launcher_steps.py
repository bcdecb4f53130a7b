"""Where a job run's start in the node's launcher goes, step by step (issue 30): the run's PID 1
(the reaper) times each step of building its root (wall and its own CPU, ``thread_time``) and
reports it with its rusage when the request asks (``trace``); the CPU of the whole run (this
process, the launcher's tree, the kernel's work charged to them) comes from a cgroup as in
``bench/sandbox_start.py``, and the machine's system time from ``/proc/stat``.

    .venv/bin/python -m bench.launcher_steps [--runs 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.sandbox_start import CpuMeter, bench_node

COMMAND = "true"


def _system_ticks() -> tuple[int, int]:
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return int(fields[2]), int(fields[0]) + int(fields[1])  # system, user (+nice)


def measure(runs: int) -> dict[str, Any]:
    from cloudlet.agent.launcher_client import LauncherClient
    from cloudlet.agent.monitor import HZ, process_tree

    with tempfile.TemporaryDirectory(prefix="launcher-steps-") as tmp:
        box, cwd, binds, env = bench_node(Path(tmp))
        plan_of = box.launch_plan

        def traced_plan(*args: Any, **kwargs: Any) -> Any:
            plan = plan_of(*args, **kwargs)
            plan.request["trace"] = True
            return plan

        box.launch_plan = traced_plan  # type: ignore[method-assign]
        meter = CpuMeter()  # before the launcher: its tree is counted too
        launcher = LauncherClient(box)
        launcher.start()
        serving = max(process_tree(launcher.pid or 0))

        def launcher_times() -> list[float]:  # its own user, system; its reaped runs' user, system
            fields = Path(f"/proc/{serving}/stat").read_text().rpartition(")")[2].split()
            return [int(x) / HZ for x in fields[11:15]]

        steps: dict[str, list[tuple[int, int]]] = defaultdict(list)
        rusage: list[tuple[float, float]] = []
        command_cpu: list[float] = []
        faults: list[int] = []
        walls: list[float] = []
        try:
            for _ in range(5):
                run = launcher.launch(["bash", "-c", COMMAND], cwd=cwd, env=env, binds=binds)
                run.stdout.read()
                run.wait()
            cpu0, ticks0 = meter.seconds(lambda: 0.0), _system_ticks()
            times0, own0 = launcher_times(), time.process_time()
            for _ in range(runs):
                t0 = time.perf_counter()
                run = launcher.launch(["bash", "-c", COMMAND], cwd=cwd, env=env, binds=binds)
                out = run.stdout.read().decode()
                run.stdout.close()
                if run.wait() != 0:
                    raise RuntimeError(out)
                walls.append((time.perf_counter() - t0) * 1000)
                for line in out.splitlines():
                    if line.startswith("cloudlet-trace "):
                        report = json.loads(line.split(" ", 1)[1])
                        for name, wall, cpu in report["steps"]:
                            steps[name].append((wall, cpu))
                        rusage.append((report["utime"], report["stime"]))
                        command_cpu.append(report["command_cpu"])
                        faults.append(report["minflt"])
            cpu1, ticks1 = meter.seconds(lambda: 0.0), _system_ticks()
            times1, own1 = launcher_times(), time.process_time()
            for _ in range(runs):  # the floor: bash -c with no sandbox
                subprocess.run(["bash", "-c", COMMAND], cwd=cwd, env=env, stdout=subprocess.PIPE, check=True)
            cpu2, ticks2 = meter.seconds(lambda: 0.0), _system_ticks()
        finally:
            launcher.close()
            meter.close()
    hz = os.sysconf("SC_CLK_TCK")
    return {
        "runs": runs,
        "privileged": os.geteuid() == 0,
        "cpu_from_cgroup": meter.exact,
        "wall_p50_ms": round(statistics.median(walls), 2),
        "cgroup_cpu_ms_per_run": round((cpu1 - cpu0) * 1000 / runs, 2),
        "machine_system_ms_per_run": round((ticks1[0] - ticks0[0]) * 1000 / hz / runs, 2),
        "machine_user_ms_per_run": round((ticks1[1] - ticks0[1]) * 1000 / hz / runs, 2),
        "bench_process_ms_per_run": round((own1 - own0) * 1000 / runs, 2),
        "launcher_ms_per_run": dict(
            zip(
                ("user", "system", "runs_user", "runs_system"),
                (round((b - a) * 1000 / runs, 2) for a, b in zip(times0, times1, strict=True)),
                strict=True,
            )
        ),
        "bare_cgroup_cpu_ms_per_run": round((cpu2 - cpu1) * 1000 / runs, 2),
        "bare_machine_system_ms_per_run": round((ticks2[0] - ticks1[0]) * 1000 / hz / runs, 2),
        "bare_machine_user_ms_per_run": round((ticks2[1] - ticks1[1]) * 1000 / hz / runs, 2),
        "command_cpu_ms_mean": round(statistics.mean(command_cpu) * 1000, 2),
        "reaper_minor_faults_median": statistics.median(faults),
        "reaper_user_ms_median": round(statistics.median(u for u, _ in rusage) * 1000, 2),
        "reaper_system_ms_median": round(statistics.median(s for _, s in rusage) * 1000, 2),
        "steps_median_us": {
            name: [
                round(statistics.median(w for w, _ in v) / 1000),
                round(statistics.median(c for _, c in v) / 1000),
            ]
            for name, v in steps.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(measure(args.runs), indent=2))


if __name__ == "__main__":
    main()
