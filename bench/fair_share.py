"""fair_share: issue 31's goals in the simulator, on a slice of the Philly trace.

The slice (``START_DAY`` + ``DAYS`` days; ``--quick``: fewer days) replays on one pool of
``CAPACITY`` GPUs, its virtual clusters mapped to 5 teams with equal shares (the 4 largest by
GPU-time, and ``other``), under FIFO, priority, fair share without borrowing, fair share with
borrowing and preemption (checkpoint every 15 min, minimum run 10 min, ≤ 60 preemptions an hour,
≤ 3 per job) and a Kueue-like policy (borrowing and reclaim without usage decay or guard). The
policies run in parallel processes (``sim.policy_compare.compare``).

Printed against the goals: Jain's index of team usage against shares over each day with every team
busy (FIFO's beside it), utilisation within 2 % of FIFO's, p95 wait of the team under its share (the
busiest team that got less than its share under FIFO) at most half FIFO's, ≤ 1 % of GPU-hours lost
to preemption, ≤ 3 preemptions of one job, and the ETA's median error at submission ≤ 25 % (jobs that
waited ≥ 1 min; every ``ETA_SAMPLE``-th job is estimated).
"""

from __future__ import annotations

import os
from typing import Any

from bench import _results
from bench._server import REPO_ROOT

NAME = "fair_share"
TRACE = REPO_ROOT.parent / "shared" / "traces" / "philly.csv"
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
    outcomes = compare_policies(load_trace(TRACE), setup)
    data["policies"] = {o.policy: o.to_dict() for o in outcomes}
    data["goals"] = goals(data["policies"])
    data["loadavg_end"] = _results.loadavg()
    return data


def _under_share_team(fifo: dict[str, Any]) -> str:
    """The team FIFO short-changes: the busiest of those that got less than their share."""
    short = [t for t in fifo["teams"] if t["usage_ratio"] < 1.0] or fifo["teams"]
    return str(max(short, key=lambda t: (t["busy_share"], -t["usage_ratio"]))["team"])


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
        f"minimum run {s['min_run_min']:g} min. Team under its share (FIFO): `{team}`.",
        "",
        "| policy | Jain, usage/share, days all busy: min (mean, days) | Jain, share of due, contended days "
        "| utilisation | p95 wait, team " + team + " | GPU-h lost | "
        "preemptions (max/job) | ETA median error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in POLICIES:
        p = pol[name]
        lines.append(
            f"| {name} | {f(p['jain_min'], 3)} ({f(p['jain_mean'], 3)}, {p['jain_days']}) "
            f"| {f(p['due_jain_min'], 3)} ({f(p['due_jain_mean'], 3)}, {p['due_days']}) "
            f"| {_pct(p['utilisation'])} | {f(_team(p, team)['wait_p95_s'] / 3600, 1)} h "
            f"| {f(p['lost_core_hours'], 0)} ({_pct(p['lost_share'])}) "
            f"| {p['preemptions']:,} ({p['max_preemptions_per_job']}) | {_pct(p['eta_median_error'])} |"
        )
    lines += ["", "| goal | fair | fair-borrow | kueue |", "|---|---|---|---|"]
    for label, key in (
        ("Jain ≥ 0.95, usage/share (every day all teams busy)", "jain_ok"),
        ("Jain ≥ 0.95, share of due (every contended day)", "due_jain_ok"),
        ("utilisation within 2 % of FIFO", "utilisation_ok"),
        ("p95 wait of the team under its share ≤ ½ FIFO's", "wait_ok"),
        ("≤ 1 % GPU-hours lost", "lost_ok"),
        ("≤ 3 preemptions per job", "preemptions_ok"),
        ("ETA median error ≤ 25 %", "eta_ok"),
    ):
        lines.append(
            f"| {label} | "
            + " | ".join("met" if g[n][key] else "**not met**" for n in ("fair", "fair-borrow", "kueue"))
            + " |"
        )
    return "\n".join(lines) + "\n"


def report(data: dict[str, Any]) -> str:
    return markdown(data)
