"""The writes of placing jobs, gathered per scheduling round and executed together.

Placing a job writes its status move (a guarded UPDATE), its runs (an INSERT) and its nodes
(an UPDATE each). Executed one placement at a time, a round that places thousands of jobs paid
a statement's overhead several times per job; gathered here, the round writes each kind in one
executemany statement (per column set) at its end. A single placement (a submission, a run
exit) goes the same way with one row each. The guard and held-object coherence are kept by the
writers (``job_status.update_statuses``, ``store.rows.update_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert
from sqlalchemy.orm import Session

from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.core import effects, events
from cloudlet.services.jobs import job_status
from cloudlet.store.rows import update_rows
from cloudlet.store.schema import JobRun, Node


@dataclass
class PlacementWrites:
    """What a round's placements write, in the order each placement wrote it: job status moves
    to Preparing, then the runs, then the nodes."""

    preparing: list[tuple[int, float, dict[str, Any]]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[tuple[object, dict[str, Any]]] = field(default_factory=list)
    child_moved: bool = False  # a placed job has a parent, told once the round commits
    # The placed rows as the round read them: their events need no read of their own.
    jobs_were: dict[int, events.JobWas] = field(default_factory=dict)
    nodes_were: dict[object, events.NodeWas] = field(default_factory=dict)

    def write(self, session: Session) -> None:
        """Execute and forget what was gathered (raises ``IllegalJobTransition`` as
        ``job_status.update_status`` would, for a job row whose status may not become Preparing)."""
        if self.preparing:
            job_status.update_statuses(session, JobStatus.PREPARING, self.preparing, self.jobs_were)
        if self.runs:
            session.connection().execute(insert(JobRun), self.runs)
        if self.nodes:
            events.nodes_moving(session, self.nodes, self.nodes_were)
            update_rows(session, Node, self.nodes)
        if self.child_moved:
            effects.parent_work(session)
        self.preparing, self.runs, self.nodes, self.child_moved = [], [], [], False
        self.jobs_were, self.nodes_were = {}, {}
