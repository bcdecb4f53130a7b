"""fair_share_pass: issue 31's decision pass at 10,000 nodes × 100,000 queued jobs over 20 teams.

Today's pass orders the queue (``scheduling.queue_order``: priority, FIFO) and places what fits
(``scheduling.schedule``). The fair-share pass: decayed usage (``fair_share.decay_usage``, 200
users), then ``fair_pass.decide`` — the factors, the fair order, which of the 10,000 running jobs
are on borrowed capacity, the preemption choice over the scheduler's 256-job window, the teams'
caps and admission. Measured here: each piece and the whole, p50 and max of
the repeats, against the goal of ≤ 100 ms on top of today's pass. Two shapes: a full pool (nothing
free: the order and preemption matter) and an empty one (10,000 free nodes: admission places
10,000 jobs).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import _results
from bench._server import REPO_ROOT
from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.fair_pass import PassPolicy, RunningJob, decide
from cloudlet.domain.jobs.preemption import Guard
from cloudlet.domain.jobs.scheduling import QueuedJob, schedule

NAME = "fair_share_pass"
NODES, QUEUED, TEAMS, USERS, WINDOW = 10_000, 100_000, 20, 200, 256
GOAL_MS = 100.0


def _world(seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    teams = tuple(fs.TeamShare(f"t{i:02d}", 1.0 + i % 4) for i in range(TEAMS))
    users = [(f"t{rng.randrange(TEAMS):02d}", f"u{i:03d}") for i in range(USERS)]
    config = fs.FairShareConfig(teams, {u: t for t, u in users}, half_life_s=86400.0)
    queued = []
    for i in range(QUEUED):
        team, user = users[rng.randrange(USERS)]
        queued.append(
            fs.FairJob(
                f"q{i:06d}",
                team,
                user,
                1,
                rng.choice((1, 2, 2, 2, 3)),
                rng.uniform(0, 86400),
                rng.random() < 0.05,
            )
        )
    running = []
    for i in range(NODES):
        team, user = users[rng.randrange(USERS)]
        running.append((f"r{i:05d}", team, user, rng.choice((1, 2, 3)), rng.uniform(0, 80000)))
    usage = fs.Usage(0.0, {key: rng.uniform(0, 1e6) for key in users})
    today_jobs = [QueuedJob(j.name, j.cores, j.priority, j.submitted_at) for j in queued]
    node_ids = [f"n{i:05d}" for i in range(NODES)]
    return {
        "config": config,
        "queued": queued,
        "running": running,
        "usage": usage,
        "today_jobs": today_jobs,
        "node_ids": node_ids,
    }


def _today(world: dict[str, Any], free: int) -> None:
    schedule(world["today_jobs"], world["node_ids"][:free])


def _fair(world: dict[str, Any], free: int, now: float = 86400.0) -> dict[str, float]:
    """The fair-share pass as the server will run it: usage brought up to date, then
    ``fair_pass.decide`` (factors, order, borrowed capacity, preemption choice, admission). The
    order alone is timed apart, for the breakdown (ms)."""
    config: fs.FairShareConfig = world["config"]
    times: dict[str, float] = {}
    t = time.perf_counter()
    running = [
        RunningJob(n, team, 1, p, False, s, s + 600) for n, team, _, p, s in world["running"][: NODES - free]
    ]
    held: dict[tuple[str, str], float] = {}
    for _, team, user, _, _ in world["running"][: NODES - free]:
        held[(team, user)] = held.get((team, user), 0.0) + 1
    usage = fs.decay_usage(world["usage"], now, held, config.half_life_s)
    times["usage_ms"] = _lap(t)
    t = time.perf_counter()
    decide(config, PassPolicy(guard=Guard()), NODES, world["queued"], running, usage, now)
    times["decide_ms"] = _lap(t)
    times["total_ms"] = times["usage_ms"] + times["decide_ms"]
    t = time.perf_counter()
    fs.fair_order(world["queued"], fs.factors(config, usage))
    times["order_alone_ms"] = _lap(t)
    return times


def usage_by_team(held: dict[tuple[str, str], float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for (team, _), cores in held.items():
        out[team] = out.get(team, 0.0) + cores
    return out


def _lap(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _timed(fn: Callable[[], object], repeats: int) -> dict[str, float]:
    laps = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        laps.append(_lap(t))
    return {"p50_ms": statistics.median(laps), "max_ms": max(laps)}


def run(quick: bool = False) -> dict[str, Any]:
    data = _results.envelope(NAME, REPO_ROOT)
    data["shape"] = {"nodes": NODES, "queued": QUEUED, "teams": TEAMS, "users": USERS, "window": WINDOW}
    data["goal_ms"] = GOAL_MS
    world = _world()
    repeats = 3 if quick else 9
    for label, free in (("full_pool", 0), ("empty_pool", NODES)):
        # Interleaved, so that both see the same load on a shared machine.
        laps, runs = [], []
        for _ in range(repeats):
            laps.append(_timed(lambda free=free: _today(world, free), 1)["p50_ms"])  # type: ignore[misc]
            runs.append(_fair(world, free))
        today = {"p50_ms": statistics.median(laps), "max_ms": max(laps)}
        fair = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        fair["max_total_ms"] = max(r["total_ms"] for r in runs)
        ratio = statistics.median(r["total_ms"] / lap for r, lap in zip(runs, laps, strict=True))
        data[label] = {
            "today": today,
            "fair": fair,
            "fair_over_today": round(ratio, 3),
            "within_goal": fair["max_total_ms"] <= GOAL_MS,
        }
    data["loadavg_end"] = _results.loadavg()
    return data


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    s = data["shape"]
    lines = [
        f"## fair_share_pass — fair-share decision pass ({data['timestamp']})",
        "",
        f"{s['nodes']:,} nodes × {s['queued']:,} queued jobs over {s['teams']} teams ({s['users']} users); "
        f"preemption over the first {s['window']} of the queue. "
        f"Goal: ≤ {data['goal_ms']:g} ms on top of today's pass.",
        "",
        "| pool | today's pass p50 ms | fair: usage | decide (order, preemption, admission) | of which order "
        "| total p50 ms | total max ms | fair / today | within goal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label in ("full_pool", "empty_pool"):
        r = data[label]
        fr = r["fair"]
        lines.append(
            f"| {label} | {f(r['today']['p50_ms'])} | {f(fr['usage_ms'])} | {f(fr['decide_ms'])} "
            f"| {f(fr['order_alone_ms'])} | {f(fr['total_ms'])} "
            f"| {f(fr['max_total_ms'])} | {f(r['fair_over_today'])}× "
            f"| {'yes' if r['within_goal'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def report(data: dict[str, Any]) -> str:
    out = []
    for label in ("full_pool", "empty_pool"):
        r = data[label]
        out.append(
            f"{label}: today's pass p50 {r['today']['p50_ms']:.1f} ms; fair-share pass adds "
            f"p50 {r['fair']['total_ms']:.1f} ms, max {r['fair']['max_total_ms']:.1f} ms, "
            f"{r['fair_over_today']:.2f}× today's pass "
            f"(goal ≤ {data['goal_ms']:g} ms: {'met' if r['within_goal'] else 'NOT met'})"
        )
    return "\n".join(out)
