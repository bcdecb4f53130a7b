"""What the events feed costs the hottest status writer: a scheduling round moving N queued jobs to
Preparing in one transaction (``job_status.update_statuses``, as ``placement_writes`` does), with
the feed's recording and without it (its hooks removed), on SQLite.

    python -m bench.events_overhead [--jobs 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import event, insert, update
from sqlalchemy.orm import Session

from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.services.core import events
from cloudlet.services.core.clock import utcnow
from cloudlet.services.jobs import job_status
from cloudlet.store import db
from cloudlet.store.schema import Job, ResourceGroup, Subscription, Workspace

HOOKS = (
    ("before_flush", events._before_flush),
    ("before_commit", events._before_commit),
)


def _round(sessions: db.sessionmaker[Session], ids: list[int]) -> float:
    with sessions.begin() as session:
        session.execute(update(Job).values(status=JobStatus.QUEUED.value))
    began = time.perf_counter()
    with sessions.begin() as session:
        job_status.update_statuses(session, JobStatus.PREPARING, [(i, 10.0, {"attempt": 1}) for i in ids])
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        engine = db.make_engine(db.sqlite_url(Path(home)))
        db.migrate(engine)
        sessions = db.session_factory(engine)
        with sessions.begin() as session:
            session.add(Subscription(id="s", display_name="s"))
            session.flush()
            session.add(ResourceGroup(id=1, subscription_id="s", name="rg", location="l"))
            session.flush()
            session.add(
                Workspace(id=1, resource_group_id=1, name="ws", location="l", tags={}, created_on=utcnow())
            )
            session.flush()
            rows = [
                {
                    "workspace_id": 1,
                    "name": f"j{i}",
                    "compute_name": "cpu",
                    "spec": {"type": "command"},
                    "status": "Queued",
                    "created_by": "a",
                    "submitted_at": float(i),
                }
                for i in range(args.jobs)
            ]
            session.execute(insert(Job), rows)
        ids = list(range(1, args.jobs + 1))
        with_feed = [_round(sessions, ids) for _ in range(args.rounds)]
        recording = events.jobs_moving
        events.jobs_moving = lambda *a, **k: None  # type: ignore[assignment]
        for name, hook in HOOKS:
            event.remove(Session, name, hook)
        try:
            without = [_round(sessions, ids) for _ in range(args.rounds)]
        finally:
            events.jobs_moving = recording  # type: ignore[assignment]
            for name, hook in HOOKS:
                event.listen(Session, name, hook)
        engine.dispose()
    for label, times in (("with the events feed", with_feed), ("without", without)):
        median = statistics.median(times)
        per_job_us = median / args.jobs * 1e6
        print(f"{label:>22}: {median * 1000:7.1f} ms per round of {args.jobs} ({per_job_us:.1f} µs a job)")


if __name__ == "__main__":
    main()
