"""How a job attempt ends, decided from how its runs ended (pure).

Recording a run's exit (``services/jobs/exits.py``) applies it once the attempt's every run has
ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.run_state import REQUEUE_REASONS, ExitReason

SINGLE_LOG = "user_logs/std_log.txt"  # the log of an attempt's only process
DOWNLOAD_FAILED = ExitReason.DOWNLOAD_FAILED
UPLOAD_FAILED = ExitReason.UPLOAD_FAILED


@dataclass(frozen=True)
class RunEnd:
    rank: int
    exit_code: int | None
    reason: str  # an ``ExitReason`` value (as stored in ``job_runs.reason``)
    log_name: str = SINGLE_LOG


def settle(
    runs: list[RunEnd],
    attempt: int,
    max_attempts: int,
    cancel_requested: bool,
    now: float,
    scheduler_preempted: int = 0,
) -> dict[str, Any]:
    """The job's columns once every run of its current attempt has ended: only those that change.
    ``status`` is a ``JobStatus``; ``services.jobs.exits`` applies the whole (the move is
    checked there, and its ``ended_at`` is the one the status table stamps: the same).
    SCHEDULER_PREEMPTED: attempts the scheduler ended by preempting the job (fair share,
    priority): they do not use up ``max_attempts`` (the job did nothing wrong, nor did its node)."""
    reasons = {r.reason for r in runs}
    if cancel_requested:
        return {"ended_at": now, "status": JobStatus.CANCELED, "status_message": "canceled"}
    lost = {ExitReason(r) for r in reasons & REQUEUE_REASONS}
    if lost:
        if attempt - scheduler_preempted < max_attempts:
            return {
                "status": JobStatus.QUEUED,
                "ended_at": None,
                "status_message": (
                    f"attempt {attempt} ended: node {sorted(lost)[0]}; requeued as attempt "
                    f"{attempt + 1} of {max_attempts} (resumes from its checkpoint dir)"
                ),
            }
        return {
            "ended_at": now,
            "status": JobStatus.FAILED,
            "error": {
                "code": "NodeLost",
                "message": f"nodes were {', '.join(sorted(lost))} on every attempt",
            },
        }
    ranked = sorted(runs, key=lambda r: r.rank)
    if ExitReason.TIMEOUT in reasons:
        return {
            "ended_at": now,
            "status": JobStatus.FAILED,
            "exit_code": next((r.exit_code for r in ranked if r.exit_code), None),
            "error": {"code": "JobTimeout", "message": "the job ran past limits.timeout and was stopped"},
        }
    download = next((r for r in ranked if r.reason == ExitReason.DOWNLOAD_FAILED), None)
    if download is not None:
        return {
            "ended_at": now,
            "status": JobStatus.FAILED,
            "exit_code": download.exit_code,
            "error": {
                "code": "InputDownloadFailed",
                "message": f"an http(s) input could not be downloaded before process {download.rank} "
                f"started (the job's command did not run); {download.log_name} says which and why",
            },
        }
    upload = next((r for r in ranked if r.reason == ExitReason.UPLOAD_FAILED), None)
    if upload is not None:
        return {
            "ended_at": now,
            "status": JobStatus.FAILED,
            "exit_code": upload.exit_code,
            "error": {
                "code": "OutputUploadFailed",
                "message": f"process {upload.rank} ran, but its node could not upload what it wrote "
                f"(outputs, checkpoints) to the server; {upload.log_name} says which and why",
            },
        }
    if all(r.exit_code == 0 for r in ranked):
        return {"ended_at": now, "status": JobStatus.COMPLETED, "exit_code": 0, "status_message": None}
    bad = next(r for r in ranked if r.exit_code != 0)
    return {
        "ended_at": now,
        "status": JobStatus.FAILED,
        "exit_code": bad.exit_code,
        "error": {
            "code": "UserError",
            "message": f"process {bad.rank} exited with code {bad.exit_code}; see {bad.log_name}",
        },
    }
