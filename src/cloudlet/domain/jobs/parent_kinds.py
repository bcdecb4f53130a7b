"""The kinds of parent job cloudlet runs, by ``JobKind`` (``domain.jobs.parent_jobs.ParentKind``).

Each kind's module provides one ``ParentKind`` object; this table is where the submit path and the
parent-job loop find it. A kind not in the table is refused at submission.
"""

from __future__ import annotations

from cloudlet.domain.endpoints import batch_scoring
from cloudlet.domain.jobs import pipeline_jobs, sweep_jobs
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.parent_jobs import ParentKind

KINDS: dict[JobKind, ParentKind] = {}
# One line per kind, e.g.:  KINDS[JobKind.PIPELINE] = pipeline_jobs.PIPELINE
KINDS[JobKind.PIPELINE] = pipeline_jobs.PIPELINE
KINDS[JobKind.SWEEP] = sweep_jobs.SWEEP
KINDS[JobKind.BATCH_SCORING] = batch_scoring.BATCH_SCORING
