"""The ``batch_scoring`` parent kind (pure): one batch endpoint invocation.

Its document (``domain.endpoints.batch_endpoints.scoring_job``) carries the command job of its one child,
``score``, which runs cloudlet's batch driver on the deployment's cluster. The parent submits the
child, follows it and ends as it ends; a child that stopped because more mini-batches failed than
``error_threshold`` allows (the driver's exit code ``THRESHOLD_EXIT``) fails the parent naming it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cloudlet.domain.endpoints.batch_endpoints import OUTPUT_NAME, THRESHOLD_EXIT
from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs import job_spec
from cloudlet.domain.jobs.job_status import ACTIVE, JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView, NewChild, ParentContext, ParentStep

CHILD_KEY = OUTPUT_NAME


def parse_scoring(doc: Any, name: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("child"), dict):
        raise validation_error(
            "child",
            "a batch_scoring job is made by invoking a batch endpoint (cloudlet batch-endpoint invoke)",
        )
    job_spec.parse_job(doc["child"], None)  # the child must be a valid command job
    return {**doc, "type": "batch_scoring", "name": name}


def advance(doc: Mapping[str, Any], children: Sequence[ChildView], context: ParentContext) -> ParentStep:
    child = next((c for c in children if c.key == CHILD_KEY), None)
    if context.cancel_requested:
        return ParentStep(
            outcome=JobStatus.CANCELED, message="canceled", cancel_reason="its batch job was canceled"
        )
    if child is None:
        return ParentStep(
            submit=(NewChild(CHILD_KEY, dict(doc["child"])),), progress="scoring child submitted"
        )
    if child.status in ACTIVE:
        return ParentStep(progress=f"scoring child '{child.name}' is {child.status.value}")
    if child.status is JobStatus.COMPLETED:
        return ParentStep(
            outcome=JobStatus.COMPLETED, message=f"scored; output '{OUTPUT_NAME}' of '{child.name}'"
        )
    if child.status is JobStatus.FAILED and child.exit_code == THRESHOLD_EXIT:
        message = (
            f"more mini-batches failed than the deployment's error_threshold allows; the log of "
            f"'{child.name}' names them (raise error_threshold, or -1 to ignore failures)"
        )
        return ParentStep(outcome=JobStatus.FAILED, message=message)
    if child.status is JobStatus.FAILED:
        return ParentStep(outcome=JobStatus.FAILED, message=f"the scoring child failed: {child.error}")
    return ParentStep(outcome=JobStatus.CANCELED, message=f"the scoring child was {child.status.value}")


class BatchScoringKind:
    def parse(self, doc: Any, name: str) -> dict[str, Any]:
        return parse_scoring(doc, name)

    def metric_keys(self, doc: Mapping[str, Any]) -> Sequence[str]:
        return []

    def advance(
        self, doc: Mapping[str, Any], children: Sequence[ChildView], context: ParentContext
    ) -> ParentStep:
        return advance(doc, children, context)


BATCH_SCORING = BatchScoringKind()
