"""``python -m bench.startup --base REV [--runs N] [--only NAME]...``: what starting a process costs,
this checkout's ``src`` beside REV's, interleaved (base, head, base, head, …; medians of N a side).

Every run is a fresh interpreter (``sys.executable``) with that side's ``src`` first on
``PYTHONPATH``; both trees are byte-compiled first (these machines set ``PYTHONDONTWRITEBYTECODE=1``,
so an uncompiled tree would be measured compiling itself). REV's ``src`` is exported with
``git archive`` to a temp folder, removed at the end. Measured per run: wall seconds and the CPU
seconds (user + system) of the process. ``server_process_import`` imports ``cloudlet.server`` as a
server process does (through ``cloudlet.startup.load`` where that side has it). ``server_start``
is ``python -m cloudlet server --workers 1`` on a fresh home until ``/healthz`` answers, the
server's CPU read from ``/proc/PID/stat`` then (an exec keeps the pid, so a CLI that execs the
server is counted whole). Nothing here passes or fails on a time: it prints medians and head/base
ratios, and the load average before and after (this machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from bench._results import loadavg

REPO_ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 120.0

# name -> the command's arguments after the interpreter
# A server process imports through cloudlet/startup.py where it exists (the collector paused).
AS_STARTED = "try:\n    from cloudlet.startup import load\nexcept ImportError:\n    load = __import__\n"
COMMANDS: dict[str, list[str]] = {
    "import_server": ["-c", "import cloudlet.server"],
    "server_process_import": ["-c", AS_STARTED + "load('cloudlet.server')"],
    "cli_help": ["-m", "cloudlet", "--help"],
    "cli_job_list_help": ["-m", "cloudlet", "job", "list", "--help"],
    "import_client": ["-c", "import cloudlet.client"],
    "import_agent": ["-c", "import cloudlet.agent.main"],
}
NAMES = (*COMMANDS, "server_start")


def _env(src: Path, home: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("CLOUDLET_DB", None)
    env.pop("CLOUDLET_WORKERS", None)
    if home is not None:
        env["CLOUDLET_HOME"] = str(home)
    return env


def run_command(src: Path, args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of ``python ARGS`` with SRC's sources."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *args], env=_env(src), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{args} exited {process.returncode}: {process.stderr.read().decode()[-2000:]}")
    process.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def server_start(src: Path) -> tuple[float, float]:
    """(wall s, CPU s) from ``cloudlet server`` started on a fresh home to ``/healthz`` answering."""
    home = Path(tempfile.mkdtemp(prefix="startup-home-"))
    cmd = [sys.executable, "-m", "cloudlet", "server", "--port", "0", "--tls-port", "0", "--workers", "1"]
    started = time.perf_counter()
    process = subprocess.Popen(
        [*cmd, "--home", str(home)],
        env=_env(src, home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            config = home / "config.json"
            if config.exists():
                try:
                    endpoint = json.loads(config.read_text())["endpoint"]
                    if httpx.get(endpoint + "/healthz", timeout=1).status_code == 200:
                        return time.perf_counter() - started, _cpu_s(process.pid)
                except (json.JSONDecodeError, KeyError, httpx.HTTPError):
                    pass
            time.sleep(0.02)
        raise RuntimeError(f"the server did not answer /healthz (exit {process.poll()})")
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(home, ignore_errors=True)


def measure(name: str, src: Path) -> tuple[float, float]:
    return server_start(src) if name == "server_start" else run_command(src, COMMANDS[name])


def compile_tree(src: Path) -> None:
    subprocess.run([sys.executable, "-m", "compileall", "-qq", "-j", "0", str(src)], check=False)


def export_rev(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=REPO_ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the git revision to compare with (e.g. main)")
    parser.add_argument("--runs", type=int, default=5, help="runs a side, interleaved (default 5)")
    parser.add_argument("--only", action="append", choices=NAMES, help="a measurement (may repeat)")
    args = parser.parse_args(argv)
    names = args.only or list(NAMES)
    head = REPO_ROOT / "src"
    with tempfile.TemporaryDirectory(prefix="startup-base-") as tmp:
        base = export_rev(args.base, Path(tmp))
        for tree in (base, head):
            compile_tree(tree)
        print(f"load average before: {loadavg()}  (runs a side: {args.runs}, base {args.base})")
        walls = f"{'base wall':>9} {'head wall':>9} {'ratio':>6}"
        print(f"{'':22} {walls}   {'base CPU':>8} {'head CPU':>8} {'ratio':>6}")
        for name in names:
            samples: dict[str, list[tuple[float, float]]] = {"base": [], "head": []}
            sides: list[tuple[str, Path]] = [("base", base), ("head", head)]
            for _ in range(args.runs):
                for side, src in sides:
                    samples[side].append(measure(name, src))
            row = _row(name, samples, statistics.median)
            print(row, flush=True)
        print(f"load average after: {loadavg()}")


def _row(
    name: str, samples: dict[str, list[tuple[float, float]]], middle: Callable[[list[float]], float]
) -> str:
    bw, hw = (middle([wall for wall, _ in samples[side]]) for side in ("base", "head"))
    bc, hc = (middle([cpu for _, cpu in samples[side]]) for side in ("base", "head"))
    return f"{name:22} {bw:9.3f} {hw:9.3f} {hw / bw:6.2f}   {bc:8.3f} {hc:8.3f} {hc / bc:6.2f}"


if __name__ == "__main__":
    main()
