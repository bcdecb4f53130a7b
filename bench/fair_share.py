"""fair_share: issue 31's goals in the simulator, on a slice of the Philly trace.

The slice (``START_DAY`` + ``DAYS`` days; ``--quick``: fewer days) replays on one pool of
``CAPACITY`` GPUs, its virtual clusters mapped to 5 teams with equal shares (the 4 largest by
GPU-time, and ``other``), under FIFO, priority, fair share without borrowing, fair share with
borrowing and preemption (checkpoint every 15 min, minimum run 10 min, ≤ 60 preemptions an hour,
≤ 3 per job) and a Kueue-like policy (borrowing and reclaim without usage decay or guard). The
policies run in parallel processes (``sim.policy_compare.compare``).

Printed against the goals: Jain's index of team usage against shares over each day with every team
busy (``sim.policy_outcome``: the hours in which every team's demand reached its share, per day;
FIFO's beside it), utilisation within 2 % of FIFO's, p95 wait of the team under its share at most
half FIFO's — two readings: the team with the lowest usage/share under FIFO over the window, and every
job submitted while its team held less than its share —, ≤ 1 % of GPU-hours lost to preemption,
≤ 3 preemptions of one job, and the ETA's median error at submission ≤ 25 % (jobs that waited
≥ 1 min; every ``ETA_SAMPLE``-th job is estimated).

Beside them, each team's jobs alone on a pool of its entitlement (FIFO): the p95 wait a policy that
gives a team exactly its share cannot beat — where it is above half FIFO's, only borrowing (other
teams' idle capacity) can meet the wait goal for that team.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench import _results
from bench._server import REPO_ROOT

NAME = "fair_share"
TRACE = Path(os.environ.get("CLOUDLET_PHILLY_TRACE", REPO_ROOT.parent / "shared" / "traces" / "philly.csv"))
POLICIES = ("fifo", "priority", "fair", "fair-borrow", "kueue")
CAPACITY, START_DAY, DAYS, QUICK_DAYS, ETA_SAMPLE = 400, 35.0, 7.0, 3.0, 5
HALF_LIFE_H, CHECKPOINT_MIN, MIN_RUN_MIN = 24.0, 15.0, 10.0
GOALS = {
    "jain": 0.95,
    "utilisation_gap": 0.02,
    "wait_ratio": 0.5,
    "lost_share": 0.01,
    "max_preemptions": 3,
    "eta_error": 0.25,
}


def run(quick: bool = False) -> dict[str, Any]:
    from cloudlet.cli.whatif_policies import PolicyRun, compare_policies
    from cloudlet.sim.trace import load_trace

    data = _results.envelope(NAME, REPO_ROOT)
    days = QUICK_DAYS if quick else DAYS
    setup = PolicyRun(
        list(POLICIES), CAPACITY, 5, START_DAY, days, CHECKPOINT_MIN, HALF_LIFE_H, MIN_RUN_MIN, ETA_SAMPLE
    )
    data["setup"] = {k: v for k, v in vars(setup).items()} | {"trace": str(TRACE), "workers": os.cpu_count()}
    trace = load_trace(TRACE)
    outcomes = compare_policies(trace, setup)
    data["policies"] = {o.policy: o.to_dict() for o in outcomes}
    data["alone_on_share"] = alone_on_share(trace, setup)
    data["goals"] = goals(data["policies"])
    data["loadavg_end"] = _results.loadavg()
    return data


def alone_on_share(trace: Any, setup: Any) -> dict[str, float]:
    """Per team: the p95 wait of its jobs alone on a pool of its entitlement, FIFO (s)."""
    from cloudlet.domain.jobs.preemption import Guard
    from cloudlet.sim.policies import POLICIES, PoolSettings, simulate
    from cloudlet.sim.policy_compare import WorkloadShape, pool_jobs

    shape = WorkloadShape(teams=setup.teams, eta_sample=10**9)  # no ETA: not measured here
    jobs, teams = pool_jobs(trace, shape, setup.start_day * 86400.0, setup.days)
    share = setup.capacity // len(teams)  # equal shares
    out = {}
    for team in teams:
        settings = PoolSettings(share, (team,), guard=Guard(), measure_until=setup.days * 86400.0)
        alone = simulate([j for j in jobs if j.team == team.name], settings, POLICIES["fifo"])
        out[team.name] = round(alone.wait_p95_s, 1)
    return out


def _under_share_team(fifo: dict[str, Any]) -> str:
    """The team under its share: the lowest usage / share under FIFO over the window."""
    return str(min(fifo["teams"], key=lambda t: (t["usage_ratio"], t["team"]))["team"])


def _team(policy: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in policy["teams"] if t["team"] == name)


def goals(policies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    fifo = policies["fifo"]
    team = _under_share_team(fifo)
    fifo_wait = _team(fifo, team)["wait_p95_s"]
    out: dict[str, Any] = {
        "under_share_team": team,
        "fifo_jain_min": fifo["jain_min"],
        "fifo_jain_mean": fifo["jain_mean"],
        "fifo_under_share_jobs_wait_p95_s": fifo["under_share_wait_p95_s"],
    }
    for name in ("fair", "fair-borrow", "kueue"):
        p = policies[name]
        wait = _team(p, team)["wait_p95_s"]
        eta = p["eta_median_error"]
        out[name] = {
            "jain_min": p["jain_min"],
            "jain_ok": _at_least(p["jain_min"], GOALS["jain"]),
            "due_jain_min": p["due_jain_min"],
            "due_jain_ok": _at_least(p["due_jain_min"], GOALS["jain"]),
            "utilisation_gap": round(fifo["utilisation"] - p["utilisation"], 4),
            "utilisation_ok": fifo["utilisation"] - p["utilisation"] <= GOALS["utilisation_gap"],
            "under_share_wait_p95_s": wait,
            "fifo_under_share_wait_p95_s": fifo_wait,
            "wait_ok": fifo_wait > 0 and wait <= GOALS["wait_ratio"] * fifo_wait,
            "under_share_jobs_wait_p95_s": p["under_share_wait_p95_s"],
            "jobs_wait_ok": p["under_share_wait_p95_s"]
            <= GOALS["wait_ratio"] * fifo["under_share_wait_p95_s"],
            "lost_share": p["lost_share"],
            "lost_ok": p["lost_share"] <= GOALS["lost_share"],
            "max_preemptions": p["max_preemptions_per_job"],
            "preemptions_ok": p["max_preemptions_per_job"] <= GOALS["max_preemptions"],
            "eta_median_error": eta,
            "eta_ok": eta is not None and eta <= GOALS["eta_error"],
        }
    return out


def _at_least(value: float | None, goal: float) -> bool:
    return value is not None and value == value and value >= goal  # NaN (no such day): not met


def _pct(value: Any) -> str:
    return "-" if value is None else f"{value:.1%}"


def markdown(data: dict[str, Any]) -> str:
    f = _results.fmt
    s, pol, g = data["setup"], data["policies"], data["goals"]
    team = g["under_share_team"]
    lines = [
        f"## fair_share — queue policies on the Philly trace ({data['timestamp']})",
        "",
        f"Days {s['start_day']:g}–{s['start_day'] + s['days']:g} of `philly.csv` on one pool of "
        f"{s['capacity']} GPUs, 5 teams with equal shares; half-life {s['half_life_h']:g} h, "
        f"checkpoint every {s['checkpoint_min']:g} min, "
        f"minimum run {s['min_run_min']:g} min. Team under its share (lowest usage/share under FIFO): "
        f"`{team}`.",
        "",
        "| policy | Jain, usage/share, all-busy hours per day: min (mean; days, hours) "
        "| Jain, share of due, contended days "
        "| utilisation | p95 wait, team " + team + " | p95 wait, jobs submitted under share (jobs) "
        "| GPU-h lost | preemptions (max/job) | ETA median error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in POLICIES:
        p = pol[name]
        lines.append(
            f"| {name} | {f(p['jain_min'], 3)} ({f(p['jain_mean'], 3)}; "
            f"{p['jain_days']}, {p['busy_hours']} h) "
            f"| {f(p['due_jain_min'], 3)} ({f(p['due_jain_mean'], 3)}, {p['due_days']}) "
            f"| {_pct(p['utilisation'])} | {f(_team(p, team)['wait_p95_s'] / 3600, 1)} h "
            f"| {f(p['under_share_wait_p95_s'] / 3600, 1)} h ({p['under_share_jobs']:,}) "
            f"| {f(p['lost_core_hours'], 0)} ({_pct(p['lost_share'])}) "
            f"| {p['preemptions']:,} ({p['max_preemptions_per_job']}) | {_pct(p['eta_median_error'])} |"
        )
    lines += ["", "| goal | fair | fair-borrow | kueue |", "|---|---|---|---|"]
    for label, key in (
        ("Jain ≥ 0.95, usage/share (every day all teams busy)", "jain_ok"),
        ("Jain ≥ 0.95, share of due (every contended day)", "due_jain_ok"),
        ("utilisation within 2 % of FIFO", "utilisation_ok"),
        ("p95 wait of the team under its share ≤ ½ FIFO's", "wait_ok"),
        ("p95 wait of jobs submitted under their team's share ≤ ½ FIFO's", "jobs_wait_ok"),
        ("≤ 1 % GPU-hours lost", "lost_ok"),
        ("≤ 3 preemptions per job", "preemptions_ok"),
        ("ETA median error ≤ 25 %", "eta_ok"),
    ):
        lines.append(
            f"| {label} | "
            + " | ".join("met" if g[n][key] else "**not met**" for n in ("fair", "fair-borrow", "kueue"))
            + " |"
        )
    lines += [
        "",
        "Jain per day (all-busy hours): "
        + "; ".join(
            f"{name} "
            + (
                ", ".join(
                    f"day {d['day']} {d['jain']:.3f} ({d['hours']} h)" for d in pol[name]["jain_by_day"]
                )
                or "-"
            )
            for name in POLICIES
        )
        + ".",
        "",
        "| team | p95 wait, FIFO | fair-borrow | jobs submitted under share: FIFO | fair-borrow "
        "| alone on its share (FIFO) |",
        "|---|---|---|---|---|---|",
    ]
    for t in pol["fifo"]["teams"]:
        b = _team(pol["fair-borrow"], t["team"])
        lines.append(
            f"| {t['team']} | {f(t['wait_p95_s'] / 3600, 1)} h | {f(b['wait_p95_s'] / 3600, 1)} h "
            f"| {f(t['under_share_wait_p95_s'] / 3600, 1)} h ({t['under_share_jobs']:,}) "
            f"| {f(b['under_share_wait_p95_s'] / 3600, 1)} h ({b['under_share_jobs']:,}) "
            f"| {f(data['alone_on_share'][t['team']] / 3600, 1)} h |"
        )
    return "\n".join(lines) + "\n"


def report(data: dict[str, Any]) -> str:
    return markdown(data)
