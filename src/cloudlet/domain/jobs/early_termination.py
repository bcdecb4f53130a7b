"""Early termination of a sweep's trials (pure): Azure ML's bandit, median stopping and truncation
selection policies over each trial's primary-metric series.

An *interval* is one report of the primary metric: a trial's ``n``-th ``mlflow.log_metric`` of it
is its interval ``n`` (1-based; the MLflow step numbers are not used). A policy is applied at every
interval that is a multiple of ``evaluation_interval`` and at least ``delay_evaluation`` (Azure's
rule). Each pass checks each running trial at its latest such interval, against every trial
(running, stopped or ended) that reached that interval:

- **bandit**: the trial's best value up to the interval is compared with the best value any trial
  had up to it; the trial stops when it is further from it than the slack: ``slack_amount``
  absolute, or ``slack_factor`` relative (maximize: below ``best / (1 + slack_factor)``; minimize:
  above ``best * (1 + slack_factor)``; for a negative best the same distance, ``|best|``-based,
  on the worse side).
- **median_stopping**: the trial stops when its best value up to the interval is worse than the
  median of every trial's running average up to the interval.
- **truncation_selection**: the trials' values at the interval are ranked; those in the worst
  ``truncation_percentage`` % (``floor(n × p / 100)`` of the ``n`` trials ranked) stop. With
  ``exclude_finished_jobs`` the trials that completed are not ranked.

``to_stop`` returns, for each trial to stop, a reason naming the policy, the interval and the numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stop:
    key: str
    reason: str


def evaluation_point(policy: Mapping[str, Any], reports: int) -> int | None:
    """The latest interval ≤ ``reports`` at which the policy applies (None: not yet)."""
    every = max(int(policy.get("evaluation_interval") or 1), 1)
    delay = int(policy.get("delay_evaluation") or 0)
    point = reports - reports % every
    return point if point >= max(delay, 1) else None


def to_stop(
    policy: Mapping[str, Any],
    maximize: bool,
    series: Mapping[str, Sequence[float]],
    active: Set[str],
    completed: Set[str] = frozenset(),
) -> list[Stop]:
    """The active trials the policy stops now. ``series``: trial key → its metric values in the
    order reported (every trial, so that the ended ones count); ``completed``: keys that ended
    Completed (for ``exclude_finished_jobs``)."""
    clean = {key: [float(v) for v in values if math.isfinite(v)] for key, values in series.items()}
    stops: list[Stop] = []
    for key in sorted(active, key=_order):
        values = clean.get(key) or []
        point = evaluation_point(policy, len(values))
        if point is None:
            continue
        reason = _check(policy, maximize, key, point, clean, completed)
        if reason is not None:
            stops.append(Stop(key, reason))
    return stops


def _check(
    policy: Mapping[str, Any],
    maximize: bool,
    key: str,
    point: int,
    series: Mapping[str, Sequence[float]],
    completed: Set[str],
) -> str | None:
    kind = policy["type"]
    reached = {k: v[:point] for k, v in series.items() if len(v) >= point}
    best = max if maximize else min
    worse = (lambda a, b: a < b) if maximize else (lambda a, b: a > b)
    mine = best(reached[key])
    at = f"at interval {point}"
    if kind == "bandit":
        leader = best(best(v) for v in reached.values())
        if policy.get("slack_amount") is not None:
            slack = float(policy["slack_amount"])
            limit = leader - slack if maximize else leader + slack
            slack_words = f"slack_amount {slack:g}"
        else:
            factor = float(policy["slack_factor"])
            limit = _relative_limit(leader, factor, maximize)
            slack_words = f"slack_factor {factor:g}"
        if worse(mine, limit):
            return (
                f"bandit policy {at}: best value {mine:.6g} is outside the {slack_words} of the best "
                f"trial's {leader:.6g} (limit {limit:.6g})"
            )
        return None
    if kind == "median_stopping":
        if len(reached) < 2:
            return None
        median = statistics.median(statistics.fmean(v) for v in reached.values())
        if worse(mine, median):
            return (
                f"median stopping policy {at}: best value {mine:.6g} is worse than the median "
                f"{median:.6g} of the running averages of {len(reached)} trials"
            )
        return None
    if kind == "truncation_selection":
        percentage = int(policy["truncation_percentage"])
        ranked = {
            k: v[point - 1]
            for k, v in reached.items()
            if k == key or not (policy.get("exclude_finished_jobs") and k in completed)
        }
        cut = math.floor(len(ranked) * percentage / 100)
        if cut == 0:
            return None
        # Worst first; ties by trial number (a stable, repeatable order).
        order = sorted(ranked, key=lambda k: (ranked[k] if maximize else -ranked[k], _order(k)))
        if key in order[:cut]:
            return (
                f"truncation selection policy {at}: value {ranked[key]:.6g} is among the lowest "
                f"{percentage}% ({cut} of {len(ranked)} trials) at that interval"
            )
        return None
    raise ValueError(f"unknown early termination policy {kind!r}")


def _relative_limit(leader: float, factor: float, maximize: bool) -> float:
    """Azure's ``best / (1 + f)`` (maximize) and ``best * (1 + f)`` (minimize), written so that a
    negative best keeps the limit on the worse side of it."""
    if maximize:
        return leader - abs(leader) * factor / (1 + factor)
    return leader + abs(leader) * factor


def _order(key: str) -> tuple[int, str]:
    return (int(key), key) if key.isdigit() else (2**63, key)
