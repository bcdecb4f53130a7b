"""simulator: cloudlet's reconcile pass at scale, on the scale simulator (``cloudlet.sim``).

The real scheduling, autoscaling, quota and node-lifecycle code runs on a simulated clock with a
simulated provider (no store, no HTTP, no processes). Scenarios, each in a fresh subprocess so its
peak RSS is its own:

* ``fleet`` — 50 clusters × max 200 nodes (10,000 nodes), 100,000 jobs queued at t = 0 (2,000 per
  cluster, durations 10 min – 2 h, seeded), boot 60 s. Every step jumps the clock to the next event
  and runs a pass over **all 50 clusters** (as the real loop does each second). Timed: every step,
  including the first (100,000 arrivals recorded, 10,000 nodes launched) and the boot step
  (10,000 agents register, 10,000 jobs placed), then N steady steps (one job ends, the next one is
  placed, 50 decisions).
* ``one_cluster`` — one cluster of 3,000 nodes (the size Ray documents for one cluster) with
  30,000 queued jobs, same shape.

Reported: pass time p50/p99/max, decisions per second (autoscaler decisions and job placements per
second of pass time), peak RSS (VmHWM) and tracemalloc's peak of the simulator's own allocations.
Anchors (published figures, not measured here): Ray 3,000+ nodes per cluster; Kueue ≈ 43
admissions/s; kube-scheduler ≈ 333 pods/s.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import tracemalloc
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import _results
from bench._server import REPO_ROOT
from bench._stats import percentile, ratio

NAME = "simulator"
SIZE = "Standard_DS3_v2"
ANCHORS = {"ray_nodes_per_cluster": 3000, "kueue_admissions_per_s": 43.0, "kube_scheduler_pods_per_s": 333.0}
BAR = {"pass_ms": 500.0, "memory_mib": 1024.0}


@dataclass(frozen=True)
class Scenario:
    name: str
    clusters: int
    nodes_per_cluster: int
    jobs: int
    steady_steps: int
    boot_s: float = 60.0
    seed: int = 1


def scenarios(quick: bool) -> list[Scenario]:
    steps = 300 if quick else 3000
    return [
        Scenario("fleet", 50, 200, 100_000, steps),
        Scenario("one_cluster", 1, 3000, 30_000, steps),
    ]


def _vm_kib(field: str) -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _build(scenario: Scenario) -> Any:
    from cloudlet.domain.compute.sizes import load_catalogue
    from cloudlet.sim import ClusterSpec, JobSpec, Simulator

    size = load_catalogue().get(SIZE)
    assert size is not None
    clusters = [
        ClusterSpec(f"c{i:02d}", size, 0, scenario.nodes_per_cluster, 300.0) for i in range(scenario.clusters)
    ]
    sim = Simulator(clusters, boot_delay_s=scenario.boot_s, pass_all=True)
    rng = random.Random(scenario.seed)
    sim.submit(
        JobSpec(f"j{i:07d}", clusters[i % len(clusters)].name, 0.0, rng.uniform(600, 7200))
        for i in range(scenario.jobs)
    )
    return sim


def _timed_steps(sim: Any, steps: int) -> list[dict[str, float]]:
    """Time each step's pass (schedule, decide, act over every cluster) apart from its record stage
    (the events: arrivals, registrations, job ends), which the real server does as requests come."""
    rows = []
    for _ in range(steps):
        if sim.events.next_time() is None:
            break
        placements, decisions, launches = sim.placements, sim.decisions, sim.provider.created
        t0 = time.perf_counter_ns()
        when = sim.record_next()
        t1 = time.perf_counter_ns()
        sim.reconcile_due()
        t2 = time.perf_counter_ns()
        rows.append(
            {
                "at_s": when,
                "record_ms": (t1 - t0) / 1e6,
                "ms": (t2 - t1) / 1e6,
                "placements": sim.placements - placements,
                "decisions": sim.decisions - decisions,
                "launches": sim.provider.created - launches,
            }
        )
    return rows


def worker(scenario: Scenario, trace_memory: bool) -> dict[str, Any]:
    """One scenario, in this (fresh) process."""
    if trace_memory:
        tracemalloc.start()
    rss_start = _vm_kib("VmRSS")
    t0 = time.perf_counter()
    sim = _build(scenario)
    build_s = time.perf_counter() - t0
    rows = _timed_steps(sim, 2)  # t = 0: arrivals + launches; t = boot: registrations + placements
    rows += _timed_steps(sim, scenario.steady_steps)
    out: dict[str, Any] = {
        "scenario": asdict(scenario),
        "build_s": round(build_s, 3),
        "steps": _summary(rows),
        "first_step": rows[0],
        "boot_step": rows[1] if len(rows) > 1 else None,
        "nodes_held_at_end": sum(c.holding for c in sim.clusters.values()),
        "jobs_queued_at_end": sum(len(c.queue) for c in sim.clusters.values()),
        "rss_start_kib": rss_start,
        "peak_rss_kib": _vm_kib("VmHWM"),
    }
    if trace_memory:
        out["tracemalloc_peak_kib"] = tracemalloc.get_traced_memory()[1] // 1024
        tracemalloc.stop()
    return out


def _summary(rows: list[dict[str, float]]) -> dict[str, Any]:
    ms = sorted(r["ms"] for r in rows)
    total_s = sum(ms) / 1000
    steady = sorted(r["ms"] for r in rows[2:])
    decisions = sum(r["decisions"] for r in rows)
    placements = sum(r["placements"] for r in rows)
    return {
        "count": len(rows),
        "p50_ms": round(percentile(ms, 50), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(ms[-1], 3) if ms else None,
        "steady_p50_ms": round(percentile(steady, 50), 3) if steady else None,
        "steady_p99_ms": round(percentile(steady, 99), 3) if steady else None,
        "total_pass_s": round(total_s, 3),
        "record_max_ms": round(max((r["record_ms"] for r in rows), default=0.0), 3),
        "decisions": decisions,
        "placements": placements,
        "decisions_per_s": round(decisions / total_s, 1) if total_s else None,
        "placements_per_s": round(placements / total_s, 1) if total_s else None,
    }


def _run_in_subprocess(scenario: Scenario, trace_memory: bool) -> dict[str, Any]:
    code = (
        "import json, sys\n"
        "from bench.simulator import Scenario, worker\n"
        f"print(json.dumps(worker(Scenario(**{asdict(scenario)!r}), {trace_memory!r})))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "src"), str(REPO_ROOT)])}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0:
        raise RuntimeError(f"simulator scenario {scenario.name} failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run(quick: bool = False) -> dict[str, Any]:
    data = _results.envelope(NAME, REPO_ROOT)
    data["anchors"] = ANCHORS
    data["bar"] = BAR
    for scenario in scenarios(quick):
        print(f"   {scenario.name}: {scenario.clusters} × {scenario.nodes_per_cluster} nodes, "
              f"{scenario.jobs:,} jobs ...", flush=True)  # fmt: skip
        result = _run_in_subprocess(scenario, trace_memory=False)
        # tracemalloc slows allocation-heavy code ~2×: a second run measures memory only.
        memory = _run_in_subprocess(
            Scenario(**{**asdict(scenario), "steady_steps": min(50, scenario.steady_steps)}), True
        )
        result["tracemalloc_peak_kib"] = memory.get("tracemalloc_peak_kib")
        data[scenario.name] = result
    data["comparisons"] = _comparisons(data)
    data["loadavg_end"] = _results.loadavg()
    return data


def _comparisons(data: dict[str, Any]) -> dict[str, Any]:
    fleet = data["fleet"]
    steps = fleet["steps"]
    boot = fleet.get("boot_step") or {}
    boot_rate = boot["placements"] / (boot["ms"] / 1000) if boot.get("ms") else None
    return {
        "placements_per_s_vs_kueue": ratio(steps["placements_per_s"] or 0, ANCHORS["kueue_admissions_per_s"]),
        "placements_per_s_vs_kube_scheduler": ratio(
            steps["placements_per_s"] or 0, ANCHORS["kube_scheduler_pods_per_s"]
        ),
        "boot_step_placements_per_s": round(boot_rate, 1) if boot_rate else None,
        "one_cluster_nodes_vs_ray": ratio(
            data["one_cluster"]["scenario"]["nodes_per_cluster"], ANCHORS["ray_nodes_per_cluster"]
        ),
        "pass_max_ms_within_bar": steps["max_ms"] is not None and steps["max_ms"] <= BAR["pass_ms"],
        "peak_rss_within_bar": (fleet["peak_rss_kib"] or 0) / 1024 <= BAR["memory_mib"],
    }


# -- output -------------------------------------------------------------------------------------
def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    lines = [
        f"## simulator — reconcile pass at scale ({data['timestamp']})",
        "",
        "Real scheduling/autoscaling/quota code on a simulated clock and provider; every step is a pass "
        "over every cluster. Times are wall time on this machine (noisy, 2 shared cores).",
        "",
        "| scenario | steps | pass p50 ms | p99 ms | max ms | first pass ms (launches) | boot pass ms "
        "(placements) | record max ms | decisions/s | placements/s | peak RSS MiB | tracemalloc MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in ("fleet", "one_cluster"):
        r = data.get(key)
        if not r:
            continue
        s, sc = r["steps"], r["scenario"]
        label = f"{key}: {sc['clusters']}×{sc['nodes_per_cluster']:,} nodes, {sc['jobs']:,} jobs"
        boot = r.get("boot_step") or {}
        lines.append(
            f"| {label} | {s['count']} | {f(s['p50_ms'])} | {f(s['p99_ms'])} | {f(s['max_ms'])} "
            f"| {f(r['first_step']['ms'])} ({r['first_step']['launches']:,}) "
            f"| {f(boot.get('ms'))} ({boot.get('placements', 0):,}) | {f(s['record_max_ms'])} "
            f"| {f(s['decisions_per_s'], 0)} "
            f"| {f(s['placements_per_s'], 0)} | {f((r['peak_rss_kib'] or 0) / 1024, 0)} "
            f"| {f((r.get('tracemalloc_peak_kib') or 0) / 1024, 0)} |"
        )
    c, a = data["comparisons"], data["anchors"]
    lines += [
        "",
        "| anchor (published, not run here) | figure | cloudlet simulator (fleet) | ratio |",
        "|---|---|---|---|",
        f"| Kueue admissions/s | {a['kueue_admissions_per_s']:g} | "
        f"{f(data['fleet']['steps']['placements_per_s'], 0)} placements/s | "
        f"{f(c['placements_per_s_vs_kueue'], 1)}× |",
        f"| kube-scheduler pods/s | {a['kube_scheduler_pods_per_s']:g} | "
        f"{f(data['fleet']['steps']['placements_per_s'], 0)} placements/s | "
        f"{f(c['placements_per_s_vs_kube_scheduler'], 1)}× |",
        f"| Ray nodes per cluster | {a['ray_nodes_per_cluster']:,}+ | "
        f"{data['one_cluster']['scenario']['nodes_per_cluster']:,} in one cluster | "
        f"{f(c['one_cluster_nodes_vs_ray'], 1)}× |",
        "",
        f"Bar: pass ≤ {BAR['pass_ms']:g} ms at 10,000 nodes × 100,000 jobs: "
        f"{'holds' if c['pass_max_ms_within_bar'] else 'does NOT hold'} (worst pass); "
        f"≤ {BAR['memory_mib']:g} MiB: "
        f"{'holds' if c['peak_rss_within_bar'] else 'does NOT hold'} (peak RSS).",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def report(data: dict[str, Any]) -> str:
    return markdown(data)
