"""The plain-SQL form of the one status writer (services/jobs/job_status.update_status) on a real store:
a legal move writes the row with the table's stamps; an illegal one matches no row, raises, and
leaves the row as it was (SQLite and PostgreSQL). And a run that reports its exit after its job
ended (canceled with its compute) leaves the job as it ended; and a Job object the session holds
for the row stays coherent with the plain UPDATE."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine

from cloudlet.domain.jobs.job_status import IllegalJobTransition, JobStatus
from cloudlet.services.core.clock import utcnow
from cloudlet.services.jobs import exits, job_status
from cloudlet.store import db
from cloudlet.store.schema import Job, JobRun, ResourceGroup, Subscription, Workspace

NOW = 500.0


def _store(engine: Engine) -> int:
    db.migrate(engine)
    with db.session_factory(engine)() as session, session.begin():
        for parent in (
            Subscription(id="s", display_name="s"),
            ResourceGroup(id=1, subscription_id="s", name="rg", location="l"),
            Workspace(id=1, resource_group_id=1, name="ws", location="l", tags={}, created_on=utcnow()),
        ):
            session.add(parent)
            session.flush()  # in order: the rows reference each other without relationships
        job = Job(
            workspace_id=1,
            name="j",
            compute_name="cpu",
            spec={"type": "command", "command": "true"},
            status=JobStatus.QUEUED.value,
            created_by="alice",
            submitted_at=1.0,
        )
        session.add(job)
        session.flush()
        return job.id


def _guarded_moves(engine: Engine) -> None:
    job_id = _store(engine)
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        job_status.update_status(session, job_id, JobStatus.PREPARING, NOW, {"attempt": 1})
        job_status.update_status(session, job_id, JobStatus.FAILED, NOW + 1, {"exit_code": 2})
    with sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.attempt, job.exit_code, job.ended_at) == ("Failed", 1, 2, NOW + 1)
    refused = pytest.raises(IllegalJobTransition, match="is Failed; it cannot become Preparing")
    with sessions() as session, session.begin(), refused:
        job_status.update_status(session, job_id, JobStatus.PREPARING, NOW + 2, {"attempt": 2})
    with sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None and (job.status, job.attempt) == ("Failed", 1)


def test_sqlite_an_illegal_move_matches_no_row(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _guarded_moves(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_an_illegal_move_matches_no_row(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _guarded_moves(engine)
    engine.dispose()


def test_a_late_exit_leaves_an_ended_job_as_it_ended(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    job_id = _store(engine)
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        job = session.get(Job, job_id)
        assert job is not None
        job_status.set_status(job, JobStatus.PREPARING, NOW)
        job.attempt = 1
        run = JobRun(
            id="r-late",
            job_id=job_id,
            attempt=1,
            rank=0,
            node_id="n-gone",
            state="running",
            spec={},
            assigned_at=NOW,
        )
        session.add(run)
        session.flush()
        # The compute's deletion ended the job while this run's node was already going away.
        job.cancel_requested = True
        job_status.set_status(job, JobStatus.CANCELED, NOW + 1, message="compute 'cpu' was deleted")
        assert exits.record_exit(session, run.id, None, "lost", NOW + 2) == []
        assert run.state == "exited"
    with sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.ended_at, job.status_message) == (
            "Canceled",
            NOW + 1,
            "compute 'cpu' was deleted",
        )
    engine.dispose()


def test_a_plain_sql_move_keeps_the_object_the_session_holds_coherent(tmp_path: Path) -> None:
    """The session holds the job as an object with a change not yet flushed: that change is
    written first, the object then reads the moved status and stamps without a query, and its
    flush at commit writes nothing over the plain UPDATE."""
    engine = db.make_engine(db.sqlite_url(tmp_path))
    job_id = _store(engine)
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        job = session.get(Job, job_id)
        assert job is not None
        job.status_message = "about to start"  # pending: the UPDATE below comes after it
        job_status.update_status(session, job_id, JobStatus.PREPARING, NOW, {"attempt": 1})
        assert job not in session.dirty
        assert (job.status, job.attempt, job.status_message) == ("Preparing", 1, "about to start")
        job_status.update_status(session, job_id, JobStatus.FAILED, NOW + 1, {"status_message": "no"})
        assert (job.status, job.ended_at, job.status_message) == ("Failed", NOW + 1, "no")
    with sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None
        assert (job.status, job.attempt, job.ended_at, job.status_message) == ("Failed", 1, NOW + 1, "no")
    engine.dispose()


def _second_job(engine: Engine) -> int:
    with db.session_factory(engine)() as session, session.begin():
        job = Job(
            workspace_id=1,
            name="k",
            compute_name="cpu",
            spec={"type": "command", "command": "true"},
            status=JobStatus.QUEUED.value,
            created_by="alice",
            submitted_at=2.0,
        )
        session.add(job)
        session.flush()
        return job.id


def test_a_batch_of_moves_is_guarded_row_by_row(tmp_path: Path) -> None:
    """A scheduling round writes its moves in one executemany statement: legal ones write each
    row with its own columns (a held object takes them); when one row may not move, the batch
    raises naming it, and the rolled-back transaction leaves every row as it was."""
    engine = db.make_engine(db.sqlite_url(tmp_path))
    first = _store(engine)
    second = _second_job(engine)
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        held = session.get(Job, second)
        assert held is not None
        moves = [(first, NOW, {"attempt": 1}), (second, NOW + 1, {"attempt": 2})]
        job_status.update_statuses(session, JobStatus.PREPARING, moves)
        assert (held.status, held.attempt) == ("Preparing", 2)
    with sessions() as session:
        got = {job.id: (job.status, job.attempt) for job in session.query(Job)}
        assert got == {first: ("Preparing", 1), second: ("Preparing", 2)}
    with sessions() as session, session.begin():
        job_status.update_status(session, second, JobStatus.FAILED, NOW + 2)
    refused = pytest.raises(IllegalJobTransition, match=f"'#{second}' is Failed; it cannot become Running")
    with refused, sessions() as session, session.begin():  # the raise rolls the transaction back
        moves = [(first, NOW + 3, {}), (second, NOW + 3, {})]
        job_status.update_statuses(session, JobStatus.RUNNING, moves)
    with sessions() as session:
        got = {job.id: (job.status, job.attempt) for job in session.query(Job)}
        assert got == {first: ("Preparing", 1), second: ("Failed", 2)}
    engine.dispose()
