"""What kind of job a job is, and how it relates to the job that made it (pure).

The kinds are Azure ML's. A ``command`` job runs one command on one or more nodes. A ``pipeline``
job runs its steps as child jobs and a ``sweep`` job its trials (``domain.jobs.parent_jobs``; the kinds
cloudlet runs are those in ``domain.jobs.parent_kinds.KINDS``); a ``batch_scoring`` job (a batch
endpoint invocation) runs one scoring child. A child names its parent in ``jobs.parent_job_id``; a job
submitted on its own has none.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class JobKind(StrEnum):
    COMMAND = "command"
    PIPELINE = "pipeline"
    SWEEP = "sweep"
    BATCH_SCORING = "batch_scoring"  # a batch endpoint invocation (domain.endpoints.batch_scoring)


def kind_of(doc: dict[str, Any]) -> JobKind:
    """The kind of a validated job document, from its Azure ``type`` (command by default)."""
    value = str(doc.get("type", JobKind.COMMAND.value)).lower()
    try:
        return JobKind(value)
    except ValueError:
        raise ValueError(f"job type {value!r} is not a kind of job") from None
