"""``python -m bench.versus --base REV [--only NAME]... [--rounds N] [--quick]``: benchmarks of this
checkout beside another commit's, in one run.

A detached git worktree of REV is made in a temp folder (removed at the end). Each chosen benchmark
runs alternately base / head / base / head (``--rounds`` pairs), every run in a fresh interpreter
(``bench/_versus_child.py``) whose ``src`` is that side's: the benchmark code is this checkout's on
both sides, only the server, store and reconciler under test differ. Each run's JSON is kept as
``bench/results/versus/<bench>.<base|head>.<round>.json``; the headline numbers side by side, with
head/base ratios, are printed and written to ``bench/results/versus.md``.

``--report-only`` rebuilds the table from the JSON already there (no run); ``--start-round K``
adds rounds K, K+1, … beside the ones already there (the table reads every round up to the last).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._results import RESULTS_DIR, loadavg, machine_info

REPO_ROOT = Path(__file__).resolve().parent.parent
VERSUS_DIR = RESULTS_DIR / "versus"
TABLE_PATH = RESULTS_DIR / "versus.md"
NAMES = ("dispatch", "mixed_load", "online_gateway", "reconcile_store")
SIDES = ("base", "head")
RUN_TIMEOUT_S = 1800
MIN_NOISE = 1.10  # a worsening under 10 % is never called a regression on this shared machine

_WORKTREE_PARENT = "/var/tmp" if os.path.isdir("/var/tmp") else None


@dataclass(frozen=True)
class Headline:
    """One number a benchmark reports; ``better`` is "lower" or "higher"."""

    label: str
    value: float | None
    better: str


def _get(data: Any, *keys: Any) -> Any:
    for key in keys:
        if isinstance(data, dict):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and -len(data) <= key < len(data):
            data = data[key]
        else:
            return None
    return data


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def dispatch_headlines(data: dict[str, Any]) -> list[Headline]:
    c = data.get("cloudlet") or {}
    return [
        Headline("warm dispatch p50 ms", _num(_get(c, "warm", "latency", "p50_ms")), "lower"),
        Headline("warm dispatch p99 ms", _num(_get(c, "warm", "latency", "p99_ms")), "lower"),
        Headline("job PUT p50 ms (warm)", _num(_get(c, "warm", "put", "p50_ms")), "lower"),
        Headline("tiny-job throughput, 2 nodes, jobs/s", _num(_get(c, "throughput", "jobs_per_s")), "higher"),
        Headline(
            "tiny-job throughput, 4 nodes, jobs/s", _num(_get(c, "throughput_wide", "jobs_per_s")), "higher"
        ),
        Headline(
            "warm dispatch p50 ms beside a queue",
            _num(_get(c, "queue", "warm_dispatch_with_queue", "p50_ms")),
            "lower",
        ),
        # CPU time moves less with the machine's load than wall time does.
        Headline("server CPU ms per warm job", _num(_get(c, "warm", "cpu_ms_per_job", "server")), "lower"),
        Headline(
            "server CPU ms per throughput job (2 nodes)",
            _num(_get(c, "throughput", "cpu_ms_per_job", "server")),
            "lower",
        ),
        Headline("scale from zero, worst s", _num(_get(c, "scale", "from_zero_worst_s")), "lower"),
        Headline("warm dispatch failures", _num(_get(c, "warm", "failed")), "lower"),
    ]


MIXED_ROUTES = ("compute_show", "job_list", "job_show", "job_submit")


def mixed_load_headlines(data: dict[str, Any]) -> list[Headline]:
    out: list[Headline] = []
    for run in data.get("runs") or []:
        workers = run.get("workers")
        w = f"{workers}w" if str(workers).isdigit() else str(workers)
        cloudlet, peer = run.get("cloudlet") or {}, run.get("peer") or {}
        errors = sum(_num(_get(cloudlet, route, "errors")) or 0 for route in (*MIXED_ROUTES, "healthz"))
        out.append(Headline(f"{w} errors", errors, "lower"))
        out.append(
            Headline(f"{w} compute show p99 ms", _num(_get(cloudlet, "compute_show", "p99_ms")), "lower")
        )
        for route in MIXED_ROUTES:
            rps = _num(_get(cloudlet, route, "throughput_rps"))
            out.append(Headline(f"{w} {route.replace('_', ' ')} req/s", rps, "higher"))
        # The in-run peer's rate is the machine's gauge: the same app on both sides.
        peer_rps = _num(_get(peer, "compute_show", "throughput_rps"))
        out.append(Headline(f"{w} (peer) compute show req/s", peer_rps, "higher"))
    return out


ONLINE_CLIENTS = (1, 8, 32)


def online_gateway_headlines(data: dict[str, Any]) -> list[Headline]:
    series = data.get("series") or {}
    out: list[Headline] = []
    for model in ("echo", "sklearn"):
        for clients in ONLINE_CLIENTS:
            s = series.get(f"{model}/gateway/{clients}") or {}
            key = f"{model} gateway {clients}c"
            out.append(Headline(f"{key} p50 ms", _num(s.get("p50_ms")), "lower"))
            out.append(Headline(f"{key} p99 ms", _num(s.get("p99_ms")), "lower"))
            out.append(Headline(f"{key} req/s", _num(s.get("throughput_rps")), "higher"))
            # The replica straight (azmlinfsrv, not cloudlet's code): the machine's gauge.
            direct = _num(_get(series, f"{model}/direct/{clients}", "throughput_rps"))
            out.append(Headline(f"{model} (direct) {clients}c req/s", direct, "higher"))
    errors = sum(_num(s.get("errors")) or 0 for name, s in series.items() if "/gateway/" in name)
    out.append(Headline("gateway errors", errors, "lower"))
    return out


def reconcile_store_headlines(data: dict[str, Any]) -> list[Headline]:
    return [
        Headline("launch pass ms", _num(data.get("launch_pass_ms")), "lower"),
        Headline("launch provider calls ms", _num(data.get("launch_calls_ms")), "lower"),
        Headline("placement pass ms", _num(data.get("placement_pass_ms")), "lower"),
        Headline("steady pass p50 ms", _num(_get(data, "steady_pass", "p50_ms")), "lower"),
        Headline("steady pass max ms", _num(_get(data, "steady_pass", "max_ms")), "lower"),
        Headline("jobs placed", _num(data.get("jobs_placed")), "higher"),
        Headline("peak RSS MiB", _num(data.get("peak_rss_mib")), "lower"),
    ]


HEADLINES: dict[str, Callable[[dict[str, Any]], list[Headline]]] = {
    "dispatch": dispatch_headlines,
    "mixed_load": mixed_load_headlines,
    "online_gateway": online_gateway_headlines,
    "reconcile_store": reconcile_store_headlines,
}


# -- comparing -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    label: str
    better: str
    base: list[float]
    head: list[float]

    @property
    def ratio(self) -> float | None:
        """head / base of the medians."""
        if not self.base or not self.head:
            return None
        base, head = statistics.median(self.base), statistics.median(self.head)
        return head / base if base > 0 and head >= 0 else None

    @property
    def spread(self) -> float | None:
        """The largest max/min among one side's runs: how far repeats of the same code moved."""
        spreads = [max(v) / min(v) for v in (self.base, self.head) if len(v) > 1 and min(v) > 0]
        return max(spreads) if spreads else None

    @property
    def worse_beyond_noise(self) -> bool | None:
        """Head worse than base by more than the runs' own spread (and more than MIN_NOISE)."""
        if not self.base or not self.head:
            return None
        base, head = statistics.median(self.base), statistics.median(self.head)
        if base == 0 or head == 0:  # counts such as errors: any increase from zero is reported
            return head > base if self.better == "lower" else head < base
        worse = head / base if self.better == "lower" else base / head
        return worse > max(MIN_NOISE, self.spread or 1.0)


def compare(name: str, runs: dict[str, list[dict[str, Any]]]) -> list[Row]:
    """Rows of one benchmark from its runs per side, in the order its headlines are listed."""
    extract = HEADLINES[name]
    order: list[str] = []
    better: dict[str, str] = {}
    values: dict[str, dict[str, list[float]]] = {}
    for side in SIDES:
        for data in runs.get(side, []):
            for h in extract(data):
                if h.label not in better:
                    order.append(h.label)
                    better[h.label] = h.better
                    values[h.label] = {s: [] for s in SIDES}
                if h.value is not None:
                    values[h.label][side].append(h.value)
    return [Row(label, better[label], values[label]["base"], values[label]["head"]) for label in order]


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if value == int(value) and abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 100 else f"{value:,.1f}"


def table(name: str, rows: list[Row]) -> str:
    lines = [
        f"### {name}",
        "",
        "| metric | better | base runs | head runs | head/base | runs' spread | worse beyond noise |",
        "|---|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        verdict = {True: "**yes**", False: "no", None: "—"}[r.worse_beyond_noise]
        lines.append(
            f"| {r.label} | {r.better} | {', '.join(_fmt(v) for v in r.base) or '—'} | "
            f"{', '.join(_fmt(v) for v in r.head) or '—'} | "
            f"{'—' if r.ratio is None else f'{r.ratio:.2f}'} | "
            f"{'—' if r.spread is None else f'{r.spread:.2f}'} | {verdict} |"
        )
    return "\n".join(lines)


# -- running -------------------------------------------------------------------------------------
def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, check=True, capture_output=True, text=True).stdout


def result_path(name: str, side: str, round_no: int) -> Path:
    return VERSUS_DIR / f"{name}.{side}.{round_no}.json"


def _run_one(name: str, side: str, round_no: int, src: Path, quick: bool) -> dict[str, Any]:
    out = result_path(name, side, round_no)
    out.unlink(missing_ok=True)
    env = {**os.environ, "CLOUDLET_BENCH_SRC": str(src)}
    env["PYTHONPATH"] = str(src) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "bench._versus_child", name, str(out), *(["--quick"] if quick else [])]
    print(f"== {name} {side} round {round_no} (load {loadavg()})", flush=True)
    began = time.monotonic()
    try:
        code = subprocess.run(cmd, cwd=REPO_ROOT, env=env, timeout=RUN_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        code = -1
    record = {"name": name, "side": side, "round": round_no, "exit": code}
    record["wall_s"] = round(time.monotonic() - began, 1)
    record["ok"] = code == 0 and out.exists()
    print(f"   {'done' if record['ok'] else 'FAILED'} in {record['wall_s']} s", flush=True)
    return record


def _load_runs(name: str, rounds: int) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for side in SIDES:
        for round_no in range(rounds):
            path = result_path(name, side, round_no)
            if path.exists():
                runs[side].append(json.loads(path.read_text()))
    return runs


def _loads(runs: dict[str, list[dict[str, Any]]]) -> str:
    parts = []
    for side in SIDES:
        for i, data in enumerate(runs[side]):
            start, end = data.get("loadavg_start") or [None], data.get("loadavg_end") or [None]
            parts.append(f"{side}{i} {_fmt(start[0])}→{_fmt(end[0])}")
    return ", ".join(parts)


def report(
    base: str, head: str, head_src: str, names: list[str], rounds: int, quick: bool, command: str
) -> str:
    machine = machine_info()
    src = "" if head_src == head else f", its src last changed at {head_src[:9]}"
    lines = [
        f"## versus: {head[:9]} (head{src}) beside {base[:9]} (base), {time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
        f"Command: `{command}`. Machine: {machine['nproc']} usable CPUs, Python {machine['python']}, "
        f"{machine['platform']}. Runs alternate base / head, up to {rounds} of each"
        f"{' (--quick counts)' if quick else ''}; the benchmark code is head's on both sides. "
        "A row is *worse beyond noise* when head's median is worse than base's by more than the "
        f"larger of {MIN_NOISE:.2f}× and the runs' spread (largest max/min of one side's repeats).",
        "",
    ]
    for name in names:
        runs = _load_runs(name, rounds)
        lines.append(table(name, compare(name, runs)))
        lines.append("")
        lines.append(f"Load average (1 min) at start → end of each run: {_loads(runs) or '—'}.")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.versus", description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with (a worktree is made)")
    parser.add_argument("--only", choices=NAMES, action="append", help="run only NAME (repeatable)")
    parser.add_argument("--rounds", type=int, default=2, help="base/head pairs per benchmark")
    parser.add_argument(
        "--start-round", type=int, default=0, help="number the new rounds from K (earlier ones are kept)"
    )
    parser.add_argument("--quick", action="store_true", help="the benchmarks' smoke counts")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the table from the JSON")
    args = parser.parse_args(argv)
    names: list[str] = args.only or list(NAMES)
    base = _git("rev-parse", args.base).strip()
    head = _git("rev-parse", "HEAD").strip()
    head_src = _git("log", "-1", "--format=%H", "HEAD", "--", "src").strip()  # bench-only commits aside
    command = "python -m bench.versus " + " ".join(argv if argv is not None else sys.argv[1:])
    failed = 0
    if not args.report_only:
        VERSUS_DIR.mkdir(parents=True, exist_ok=True)
        # Not under /tmp: a run's sandbox (the node launcher, docs/isolation.md) gets a /tmp of its
        # own, so an agent started from a base there cannot import its code (every job failed).
        tmp = Path(tempfile.mkdtemp(prefix="cloudlet-versus-", dir=_WORKTREE_PARENT))
        tree = tmp / "base"
        try:
            _git("worktree", "add", "--detach", str(tree), base)
            if (REPO_ROOT / ".cache").exists():  # the inference server's venv the replicas run on
                (tree / ".cache").symlink_to((REPO_ROOT / ".cache").resolve())
            srcs = {"base": tree / "src", "head": REPO_ROOT / "src"}
            records = [
                _run_one(name, side, round_no, srcs[side], args.quick)
                for name in names
                for round_no in range(args.start_round, args.start_round + args.rounds)
                for side in SIDES
            ]
            failed = sum(1 for r in records if not r["ok"])
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO_ROOT, check=False)
            subprocess.run(["git", "worktree", "prune"], cwd=REPO_ROOT, check=False)
            shutil.rmtree(tmp, ignore_errors=True)
    text = report(base, head, head_src, names, args.start_round + args.rounds, args.quick, command)
    TABLE_PATH.write_text(text + "\n")
    print(text)
    print(f"wrote {TABLE_PATH}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
