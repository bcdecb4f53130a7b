"""What kind of job a job is, and how it relates to the job that made it (pure).

Every job is a ``command`` job today: one command on one or more nodes. The other kinds are
Azure ML's and reserved here so the column's values are settled before they exist: a ``pipeline``
job runs its steps as child jobs, a ``sweep`` job runs its trials as child jobs, and a
``batch_scoring`` job splits its input across child jobs. A child names its parent in
``jobs.parent_job_id``; a command job submitted on its own has none.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class JobKind(StrEnum):
    COMMAND = "command"
    PIPELINE = "pipeline"  # reserved: not accepted yet
    SWEEP = "sweep"  # reserved: not accepted yet
    BATCH_SCORING = "batch_scoring"  # reserved: not accepted yet


ACCEPTED: frozenset[JobKind] = frozenset({JobKind.COMMAND})


def kind_of(doc: dict[str, Any]) -> JobKind:
    """The kind of a validated job document, from its Azure ``type`` (``job_spec.parse_job``
    refuses every type it cannot run, so a stored document's type is always an accepted kind)."""
    kind = JobKind(str(doc.get("type", JobKind.COMMAND.value)).lower())
    if kind not in ACCEPTED:
        raise ValueError(f"job type {kind.value!r} is not accepted yet")
    return kind
