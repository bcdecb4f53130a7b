"""Following a sweep: a line as each trial starts and as it ends, then the sweep's summary.

A sweep's own log is empty for as long as its trials run (minutes), so ``job create --stream``
and ``job stream`` follow its trials instead of its log, as Azure ML's studio lists them.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from cloudlet.client.job_entities import Job
from cloudlet.client.job_support import JobFollower, job_summary
from cloudlet.domain.jobs.job_status import FINAL, JobStatus

# A trial canceled while queued never started: it gets only its end line.
STARTED = frozenset({JobStatus.RUNNING, JobStatus.FINALIZING, JobStatus.COMPLETED, JobStatus.FAILED})


def _params(trial: dict[str, Any]) -> str:
    params = trial.get("params") or {}
    return ", ".join(f"{key}={value}" for key, value in params.items())


def _ended(trial: dict[str, Any], metric: str | None) -> str:
    text = f"trial {trial.get('key')} (job {trial.get('name')}) {trial.get('status')}"
    if trial.get("metric") is not None and metric:
        text += f": {metric}={trial['metric']}"
    if trial.get("status") != "Completed" and trial.get("status_message"):
        text += f" ({trial['status_message']})"
    return text


def trial_events(trials: list[dict[str, Any]], seen: dict[str, str], metric: str | None) -> list[str]:
    """The lines for what changed since ``seen`` (trial name → the last status reported); updates it."""
    lines: list[str] = []
    for trial in trials:
        name, status = str(trial.get("name")), str(trial.get("status"))
        before = seen.get(name)
        if before == status:
            continue
        if status in STARTED and (before is None or before not in STARTED):
            lines.append(f"trial {trial.get('key')} (job {name}) started: {_params(trial)}")
        if status in FINAL:
            lines.append(_ended(trial, metric))
        seen[name] = status
    return lines


def stream_sweep(ops: JobFollower, name: str, out: TextIO, timeout: float | None) -> Job:
    deadline = None if timeout is None else time.monotonic() + timeout
    seen: dict[str, str] = {}
    while True:
        parent = ops.get(name)._to_dict()
        sweep = parent.get("sweep") or {}
        metric = (sweep.get("objective") or {}).get("primary_metric")
        for line in trial_events(list(sweep.get("trials") or []), seen, metric):
            out.write(line + "\n")
        out.flush()
        if parent.get("status") in FINAL:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"sweep {name} still {parent.get('status')} after {timeout}s")
        time.sleep(ops.stream_poll_interval)
    job = ops.get(name)
    summary = job._to_dict()
    out.write(job_summary(summary) + "\n")
    best = (summary.get("sweep") or {}).get("best_trial")
    if best:
        key, job_name = best.get("key"), best.get("name")
        out.write(f"best trial {key} (job {job_name}): {best.get('metric')} ({_params(best)})\n")
    out.flush()
    return job
