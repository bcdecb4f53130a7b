"""What starting a job run costs in its sandbox (issue 30): ``bash -c 'date +%s.%N'`` started N
times each way, interleaved, as the agent starts a run (stdout a pipe, the run's directory bound
read-write):

- ``launcher``: handed to the node's launcher (nodekit/launcher.py), one sandbox per node;
- ``bwrap``: a ``bwrap`` + ``setpriv`` per run (``Sandbox.wrap``, the fallback);
- ``bare``: ``bash -c`` with no sandbox (the floor).

    .venv/bin/python -m bench.sandbox_start [--runs 150]

Per run: *start* (from the call to the moment ``date`` read the clock, by the time it prints),
*total* (to its exit and end of output, as the runner sees it), and the CPU it cost: this
process's own, its reaped children's, and the launcher's process tree (its forks are reaped by it).
Needs bwrap; as root it measures the agent's privileged path, else the user-namespace one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _results
from bench._results import fmt
from bench._stats import percentile

NAME = "sandbox_start"
COMMAND = "date +%s.%N"
MODES = ("launcher", "bwrap", "bare")


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """CPU seconds of this process and everything it starts: a cgroup of its own where it may
    make one (root; cgroup v1 ``cpuacct``: it counts processes nobody waited for, such as those
    a PID namespace's end kills), else its own and its reaped children's."""

    def __init__(self) -> None:
        self.usage: Path | None = None
        group = Path(f"/sys/fs/cgroup/cpuacct/cloudlet-bench-{os.getpid()}")
        try:
            group.mkdir()
            (group / "cgroup.procs").write_text(str(os.getpid()))
            self.usage = group / "cpuacct.usage"
            self.group = group
        except OSError:
            self.usage = None

    @property
    def exact(self) -> bool:
        return self.usage is not None

    def seconds(self, extra: Callable[[], float]) -> float:
        if self.usage is not None:
            return int(self.usage.read_text()) / 1e9
        return time.process_time() + _children_cpu_s() + extra()

    def close(self) -> None:
        if self.usage is not None:
            with contextlib.suppress(OSError):
                Path("/sys/fs/cgroup/cpuacct/cgroup.procs").write_text(str(os.getpid()))
                self.group.rmdir()


def bench_node(root: Path) -> tuple[Any, Path, list[Any], dict[str, str]]:
    """A node's sandbox (bwrap, as the local provider's) under ROOT, one run folder bound writable,
    and a minimal environment: (sandbox, run folder, binds, env)."""
    from cloudlet.nodekit.sandbox import Bind, Policy, Sandbox

    cwd = root / "work" / "run"
    cwd.mkdir(parents=True)
    box = Sandbox(Policy(mode="bwrap"), hostname="n-bench", state_dir=root / "state")
    box.hand_over(cwd)
    return box, cwd, [Bind(str(cwd), writable=True)], {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}


def measure(runs: int) -> dict[str, Any]:
    from cloudlet.agent.launcher_client import LauncherClient
    from cloudlet.agent.monitor import HZ, process_tree

    with tempfile.TemporaryDirectory(prefix="sandbox-start-") as tmp:
        box, cwd, binds, env = bench_node(Path(tmp))
        meter = CpuMeter()
        launcher = LauncherClient(box)
        began = time.monotonic()
        launcher.start()
        launcher_start_ms = (time.monotonic() - began) * 1000
        # The launcher's python (its runs' forks are reaped by it: their CPU lands in its cutime).
        serving = max(process_tree(launcher.pid or 0))
        stat = f"/proc/{serving}/stat"

        def launcher_cpu_s() -> float:
            fields = Path(stat).read_text().rpartition(")")[2].split()
            return sum(int(x) for x in fields[11:15]) / HZ

        def one(mode: str) -> tuple[float, float, float]:
            """(start ms, total ms, CPU ms) of one run."""
            argv = ["bash", "-c", COMMAND]
            cpu_before = meter.seconds(launcher_cpu_s)
            t0 = time.time()
            if mode == "launcher":
                proc: Any = launcher.launch(argv, cwd=cwd, env=env, binds=binds)
            else:
                proc = subprocess.Popen(
                    box.wrap(argv, cwd=cwd, binds=binds) if mode == "bwrap" else argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    bufsize=0,
                )
            out = proc.stdout.read()
            proc.stdout.close()
            code = proc.wait()
            t1 = time.time()
            cpu = meter.seconds(launcher_cpu_s) - cpu_before
            if code != 0:
                raise RuntimeError(f"{mode}: exit {code}: {out!r}")
            ran_at = float(out.decode().strip())
            return (ran_at - t0) * 1000, (t1 - t0) * 1000, cpu * 1000

        samples: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in MODES}
        try:
            for mode in MODES:  # warm-up: page cache, the launcher's first fork
                one(mode)
            order = list(MODES)
            for _ in range(runs):
                random.shuffle(order)
                for mode in order:
                    samples[mode].append(one(mode))
        finally:
            launcher.close()
            meter.close()

    out: dict[str, Any] = {
        **_results.envelope(NAME, Path(__file__).resolve().parent.parent),
        "runs": runs,
        "command": COMMAND,
        "privileged": os.geteuid() == 0,
        "launcher_start_ms": round(launcher_start_ms, 1),
        "cpu_from_cgroup": meter.exact,
    }
    for mode, values in samples.items():
        start = sorted(v[0] for v in values)
        total = sorted(v[1] for v in values)
        out[mode] = {
            "start_p50_ms": round(percentile(start, 50), 2),
            "start_p99_ms": round(percentile(start, 99), 2),
            "total_p50_ms": round(percentile(total, 50), 2),
            "total_p99_ms": round(percentile(total, 99), 2),
            "cpu_ms_per_run": round(sum(v[2] for v in values) / len(values), 2),
        }
    for mode in ("launcher", "bwrap"):
        out[mode]["total_p50_x_bare"] = round(out[mode]["total_p50_ms"] / out["bare"]["total_p50_ms"], 2)
    return out


def run(quick: bool) -> dict[str, Any]:
    """``python -m bench --only sandbox_start``: 150 runs each way (30 quick)."""
    return measure(30 if quick else 150)


def markdown(data: dict[str, Any]) -> str:
    cpu = "from a cgroup" if data["cpu_from_cgroup"] else "by rusage"
    rows = [
        f"`bash -c '{data['command']}'` × {data['runs']} each way, interleaved "
        f"({'root agent' if data['privileged'] else 'unprivileged agent'}; "
        f"the launcher itself started in {fmt(data['launcher_start_ms'], 1)} ms; load average at the "
        f"start {data.get('loadavg_start')}; CPU {cpu}).",
        "",
        "| | start p50 | start p99 | total p50 | total p99 | CPU per run | total p50 ÷ bare |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        d = data[mode]
        rows.append(
            f"| {mode} | {fmt(d['start_p50_ms'])} ms | {fmt(d['start_p99_ms'])} ms | "
            f"{fmt(d['total_p50_ms'])} ms | {fmt(d['total_p99_ms'])} ms | {fmt(d['cpu_ms_per_run'])} ms | "
            f"{fmt(d.get('total_p50_x_bare', 1.0))}× |"
        )
    return "\n".join(rows)


def report(data: dict[str, Any]) -> str:
    return "; ".join(
        f"{mode}: total p50 {fmt(data[mode]['total_p50_ms'])} ms, p99 {fmt(data[mode]['total_p99_ms'])} ms, "
        f"{fmt(data[mode]['cpu_ms_per_run'])} ms CPU"
        for mode in MODES
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    data = measure(args.runs)
    print(json.dumps(data, indent=2))
    print(report(data))


if __name__ == "__main__":
    main()
