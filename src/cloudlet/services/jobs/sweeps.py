"""Sweep jobs: what ``job show`` says about one (its best trial, and each trial's values and metric).

The decisions are ``domain.jobs.sweep_jobs``'s; this reads a sweep's trials and their primary metric
(``services.tracking.tracking``) and hands them to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.orm import Session

from cloudlet.domain.jobs import sweep_jobs
from cloudlet.domain.jobs.parent_jobs import EARLY_TERMINATED
from cloudlet.services.jobs import job_children
from cloudlet.store.schema import Job

# (session, job ids, metric key) → {job id: [(step, value), …]}
# (``services.tracking.tracking.metric_history``).
MetricHistory = Callable[[Session, Sequence[int], str], dict[int, list[tuple[int, float]]]]


def view(session: Session, sweep: Job, kids: Sequence[Job], history: MetricHistory) -> dict[str, Any]:
    """``{"objective", "search_space", "best_trial", "trials": [{key, name, status, params, metric,
    reports, early_terminated, termination_reason}]}``: ``metric`` is the trial's last
    value of the primary metric, ``reports`` how many it logged; ``early_terminated`` says the
    sweep's early-termination policy stopped it, and ``termination_reason`` why (its numbers)."""
    doc = sweep.spec
    metric = doc["objective"]["primary_metric"]
    series = history(session, [kid.id for kid in kids], metric) if kids else {}
    views = [job_children.view_of(kid, {metric: series.get(kid.id, [])}) for kid in kids]
    best = sweep_jobs.best_trial(doc, views)
    trials = []
    for kid, child in zip(kids, views, strict=True):
        values = sweep_jobs.series_of(doc, child)
        stopped = _policy_reason(kid)
        trials.append(
            {
                "key": child.key,
                "name": child.name,
                "status": child.status.value,
                "status_message": kid.status_message,
                "params": sweep_jobs.params_of(doc, child),
                "metric": values[-1] if values else None,
                "reports": len(values),
                "early_terminated": stopped is not None,
                "termination_reason": stopped,
            }
        )
    return {
        "objective": doc["objective"],
        "search_space": doc["search_space"],
        "sampling_algorithm": doc["sampling_algorithm"]["type"],
        "max_total_trials": sweep_jobs.total_trials(doc),
        "best_trial": None
        if best is None
        else {"key": best.key, "name": best.name, "metric": best.value, "params": dict(best.params)},
        "trials": trials,
    }


def _policy_reason(kid: Job) -> str | None:
    """Why the early-termination policy stopped trial KID (None: it did not)."""
    error = kid.error if isinstance(kid.error, dict) else {}
    if error.get("code") != EARLY_TERMINATED:
        return None
    return str(error.get("message") or "stopped by the early-termination policy")
