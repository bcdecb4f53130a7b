"""``cloudlet compute what-if --policy fifo,fair,...``: queue policies compared on a trace, on one
shared pool of ``--capacity`` GPUs (or nodes), with the trace's groups as teams."""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from cloudlet.sim.policy_outcome import PolicyOutcome
    from cloudlet.sim.trace import Trace


class PolicyInputError(Exception):
    """Bad input: the message names the flag and the fix."""


@dataclass(frozen=True)
class PolicyRun:
    policies: list[str]
    capacity: int
    teams: int
    start_day: float
    days: float | None
    checkpoint_min: float
    half_life_h: float
    min_run_min: float
    eta_sample: int
    high_share: float = 0.0  # jobs drawn high priority (the trace has none)
    low_share: float = 0.0  # jobs drawn low priority


def parse_policies(text: str) -> list[str]:
    from cloudlet.sim.policies import POLICIES

    names = [part.strip().lower() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in POLICIES]
    if not names or unknown:
        raise PolicyInputError(
            f"--policy {text!r}: {'unknown policy ' + repr(unknown[0]) if unknown else 'no policy'}; "
            f"give a comma-separated list of {', '.join(POLICIES)}."
        )
    return list(dict.fromkeys(names))


def parse_priority_mix(text: str | None) -> tuple[float, float]:
    """``--priority-mix HIGH,LOW``: the shares of jobs drawn high and low priority."""
    if text is None:
        return 0.0, 0.0
    try:
        high, low = (float(part) for part in text.split(","))
    except ValueError:
        high = low = math.nan
    if not (0 <= high <= 1 and 0 <= low <= 1 and high + low <= 1):
        raise PolicyInputError(
            f"--priority-mix {text!r}: give HIGH,LOW shares of jobs between 0 and 1 (e.g. 0.1,0.2)."
        )
    return high, low


def check_run(run: PolicyRun) -> None:
    if run.capacity < 1:
        raise PolicyInputError("--capacity: give the pool's GPUs (or nodes), a whole number >= 1.")
    if run.teams < 1:
        raise PolicyInputError("--teams: give a whole number >= 1.")
    for flag, value in (("--checkpoint", run.checkpoint_min), ("--half-life", run.half_life_h)):
        if not (math.isfinite(value) and value >= 0):
            raise PolicyInputError(f"{flag} {value:g}: give a number >= 0.")
    if run.days is not None and not run.days > 0:
        raise PolicyInputError(f"--days {run.days:g}: give a number of days > 0.")


def compare_policies(trace: Trace, run: PolicyRun) -> list[PolicyOutcome]:
    from cloudlet.domain.jobs.preemption import Guard
    from cloudlet.sim.policies import PoolSettings
    from cloudlet.sim.policy_compare import WorkloadShape, compare, pool_jobs

    jobs, teams = pool_jobs(
        trace,
        WorkloadShape(
            teams=run.teams, eta_sample=run.eta_sample, high_share=run.high_share, low_share=run.low_share
        ),
        run.start_day * 86400.0,
        run.days,
    )
    if not jobs:
        raise PolicyInputError(
            f"--start-day {run.start_day:g} --days {run.days}: no job of the trace is in that window."
        )
    span = run.days * 86400.0 if run.days is not None else None
    settings = PoolSettings(
        capacity=run.capacity,
        teams=teams,
        half_life_s=run.half_life_h * 3600.0,
        guard=Guard(min_run_s=run.min_run_min * 60.0),
        checkpoint_s=run.checkpoint_min * 60.0,
        measure_until=span,
    )
    return compare(jobs, settings, run.policies, workers=min(len(run.policies), os.cpu_count() or 1))


def duration_text(seconds: float) -> str:
    """A duration as a person reads it: seconds, minutes, hours or days."""
    if math.isnan(seconds):
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _jain(o: PolicyOutcome) -> str:
    if not o.jain_days:
        return "- (no hour with every team busy)"
    return f"{o.jain_min:.3f} min, {o.jain_mean:.3f} mean ({o.jain_days} days, {o.busy_hours} h)"


def _due(o: PolicyOutcome) -> str:
    if not o.due_days:
        return "- (no contended day)"
    return f"{o.due_jain_min:.3f} min, {o.due_jain_mean:.3f} mean ({o.due_days} days)"


_ROWS: list[tuple[str, Callable[[PolicyOutcome], str]]] = [
    ("Jain, usage/share (hours all busy, per day)", _jain),
    ("Jain, share of due (contended days)", _due),
    ("utilisation", lambda o: f"{o.utilisation:.1%}"),
    ("wait p95 (all jobs)", lambda o: duration_text(o.wait_p95_s)),
    (
        "wait p95, jobs of teams under their share",
        lambda o: f"{duration_text(o.under_share_wait_p95_s)} ({o.under_share_jobs:,} jobs)",
    ),
    ("GPU-hours lost to preemption", lambda o: f"{o.lost_core_hours:,.1f} ({o.lost_share:.2%})"),
    ("preemptions", lambda o: f"{o.preemptions:,}"),
    ("max preemptions of one job", lambda o: str(o.max_preemptions)),
    ("ETA median error (waited ≥ 1 min)", lambda o: f"{o.eta_median_error:.0%} of {o.eta_jobs:,} jobs"),
    ("jobs", lambda o: f"{o.jobs:,}"),
]


def render_policies(outcomes: list[PolicyOutcome]) -> str:
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("METRIC", no_wrap=True)
    for outcome in outcomes:
        table.add_column(outcome.policy)
    for label, cell in _ROWS:
        table.add_row(label, *(cell(o) for o in outcomes))
    for team in outcomes[0].teams:
        table.add_row(
            f"team {team.team}: wait p95 / used of share",
            *(
                f"{duration_text(o.team(team.team).wait_p95_s)} / {o.team(team.team).usage_ratio:.0%}"
                for o in outcomes
            ),
        )
    console = Console(file=io.StringIO(), width=250, force_terminal=False)
    console.print(table)
    text: str = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def policies_doc(
    trace: Trace, run: PolicyRun, outcomes: list[PolicyOutcome], elapsed_s: float
) -> dict[str, Any]:
    return {
        "trace": str(trace.path),
        "group_column": trace.group_column,
        "capacity": run.capacity,
        "start_day": run.start_day,
        "days": run.days,
        "checkpoint_min": run.checkpoint_min,
        "half_life_h": run.half_life_h,
        "elapsed_s": round(elapsed_s, 3),
        "policies": [o.to_dict() for o in outcomes],
    }


__all__ = [
    "PolicyInputError",
    "PolicyRun",
    "check_run",
    "compare_policies",
    "parse_policies",
    "parse_priority_mix",
    "render_policies",
]
