"""The events feed on a real store: a status written through the ORM or in plain SQL becomes an
event in the same transaction (a rollback, or a savepoint's, forgets it); pruning past the
retention window answers 410 with the oldest seq kept; and on PostgreSQL, concurrent writers that
hold their transactions open after taking a seq never let a polling reader skip one."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.events import EventType, Retention
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.resources import COMPUTES
from cloudlet.services.core import events
from cloudlet.services.core.clock import utcnow
from cloudlet.services.jobs import job_status
from cloudlet.services.views import events as feed
from cloudlet.store import db, rows
from cloudlet.store.schema import (
    BatchDeployment,
    BatchEndpoint,
    Compute,
    Job,
    LifecycleEvent,
    Node,
    OnlineDeployment,
    OnlineEndpoint,
    Operation,
    ResourceGroup,
    Subscription,
    Workspace,
)


def _store(engine: Engine) -> sessionmaker[Session]:
    db.migrate(engine)
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        for parent in (
            Subscription(id="s", display_name="s"),
            ResourceGroup(id=1, subscription_id="s", name="rg", location="l"),
            Workspace(id=1, resource_group_id=1, name="ws", location="l", tags={}, created_on=utcnow()),
            Workspace(id=2, resource_group_id=1, name="other", location="l", tags={}, created_on=utcnow()),
        ):
            session.add(parent)
            session.flush()
    return sessions


def _job(session: Session, name: str, workspace_id: int = 1) -> int:
    job = Job(
        workspace_id=workspace_id,
        name=name,
        compute_name="cpu",
        spec={"type": "command", "command": "true"},
        status=JobStatus.QUEUED.value,
        created_by="alice",
        submitted_at=1.0,
    )
    session.add(job)
    session.flush()
    return job.id


def _moves(sessions: sessionmaker[Session], ws_id: int | None = 1) -> list[tuple[str, str | None, str]]:
    with sessions() as session:
        return [
            (e.name, e.from_state, e.to_state) for e in feed.page(session, ws_id, feed.EventFilter()).events
        ]


def _recorded(engine: Engine) -> None:
    sessions = _store(engine)
    with sessions() as session, session.begin():
        job_id = _job(session, "a")
        _job(session, "elsewhere", workspace_id=2)
    with sessions() as session, session.begin():  # plain SQL, as placements and exits write
        job_status.update_statuses(session, JobStatus.PREPARING, [(job_id, 10.0, {"attempt": 1})])
        job_status.update_status(session, job_id, JobStatus.RUNNING, 11.0)
    with sessions() as session, session.begin():  # the ORM, as cancel writes
        job = session.get(Job, job_id)
        assert job is not None
        job_status.set_status(job, JobStatus.CANCELED, 12.0, message="canceled")
    assert _moves(sessions) == [
        ("a", None, "Queued"),
        ("a", "Queued", "Preparing"),
        ("a", "Preparing", "Running"),
        ("a", "Running", "Canceled"),
    ]
    assert ("elsewhere", None, "Queued") in _moves(sessions, None)  # the administrator's feed
    assert ("elsewhere", None, "Queued") not in _moves(sessions, 1)

    # A rolled-back change leaves no event; nor does a rolled-back savepoint's.
    with sessions() as session:
        session.begin()
        _job(session, "never")
        session.rollback()
    with sessions() as session, session.begin():
        _job(session, "kept")
        savepoint = session.begin_nested()
        _job(session, "undone")
        savepoint.rollback()
    names = [name for name, _, _ in _moves(sessions)]
    assert "never" not in names and "undone" not in names and names[-1] == "kept"


def test_sqlite_records_each_move_in_its_transaction(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _recorded(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_records_each_move_in_its_transaction(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _recorded(engine)
    engine.dispose()


def test_every_kind_of_lifecycle_change_is_an_event(tmp_path: Path) -> None:
    """Computes, operations, nodes (through the ORM and in plain SQL, as placements write them),
    online deployments and batch deployments."""
    engine = db.make_engine(db.sqlite_url(tmp_path))
    sessions = _store(engine)
    now = utcnow()
    with sessions() as session, session.begin():
        compute = Compute(
            workspace_id=1,
            name="cpu",
            type="amlcompute",
            location="l",
            spec={},
            created_by="a",
            provisioning_state="Creating",
            created_on=now,
            last_modified_on=now,
        )
        session.add(compute)
        session.flush()
        session.add(
            Operation(
                id="op-1",
                workspace_id=1,
                resource_type=COMPUTES,
                resource_id=compute.id,
                resource_name="cpu",
                kind="create",
                status="InProgress",
                step="start",
                created_by="a",
                created_on=now,
            )
        )
        session.add(
            Node(
                id="n1",
                workspace_id=1,
                owner_type=COMPUTES,
                owner_id=compute.id,
                installation_id="i",
                location="l",
                provider="local",
                size="s",
                family="f",
                vcpus=1,
                memory_gb=1.0,
                tier="dedicated",
                state="creating",
                state_since=1.0,
                token_hash="t",
                created_at=1.0,
            )
        )
        online = OnlineEndpoint(
            workspace_id=1,
            name="web",
            spec={},
            primary_key="k",
            secondary_key="k",
            provisioning_state="Succeeded",
            created_by="a",
            created_on=now,
        )
        batch = BatchEndpoint(
            workspace_id=1, name="nightly", spec={}, created_by="a", created_at=1.0, modified_at=1.0
        )
        session.add_all([online, batch])
        session.flush()
        session.add(
            OnlineDeployment(
                endpoint_id=online.id,
                name="blue",
                spec={},
                provisioning_state="Creating",
                stage="placing",
                created_by="a",
                created_on=now,
            )
        )
        session.add(
            BatchDeployment(
                endpoint_id=batch.id, name="v1", spec={}, created_by="a", created_at=1.0, modified_at=1.0
            )
        )
    with sessions() as session, session.begin():
        found_compute = session.scalar(select(Compute))
        operation = session.get(Operation, "op-1")
        node = session.get(Node, "n1")
        deployment = session.scalar(select(OnlineDeployment))
        assert found_compute and operation and node and deployment
        found_compute.provisioning_state = "Succeeded"
        operation.status = "Succeeded"
        node.state = "idle"
        deployment.provisioning_state = "Succeeded"
        session.delete(session.scalar(select(BatchDeployment)))
    with sessions() as session, session.begin():  # plain SQL, as a placement writes its nodes
        events.nodes_moving(session, [("n1", {"state": "busy", "state_since": 2.0}), ("n1", {"usage": {}})])
        rows.update_rows(session, Node, [("n1", {"state": "busy", "state_since": 2.0})])
    with sessions() as session:
        got = [
            (e.type, e.name, e.compute, e.from_state, e.to_state)
            for e in feed.page(session, 1, feed.EventFilter()).events
        ]
    made = [
        ("compute", "cpu", "cpu", None, "Creating"),
        ("operation", "op-1", "cpu", None, "InProgress"),
        ("node", "n1", "cpu", None, "creating"),
        ("deployment", "web/blue", None, None, "Creating"),
        ("deployment", "nightly/v1", None, None, "Succeeded"),
    ]
    moved = [
        ("compute", "cpu", "cpu", "Creating", "Succeeded"),
        ("operation", "op-1", "cpu", "InProgress", "Succeeded"),
        ("node", "n1", "cpu", "creating", "idle"),
        ("deployment", "web/blue", None, "Creating", "Succeeded"),
        ("deployment", "nightly/v1", None, "Succeeded", "Deleted"),
    ]
    # Within one transaction the ORM flushes in its own order; the transactions come in theirs.
    assert sorted(got[:5]) == sorted(made) and sorted(got[5:10]) == sorted(moved), got
    assert got[10:] == [("node", "n1", "cpu", "idle", "busy")], got
    engine.dispose()


def test_pruned_feed_answers_410_with_the_oldest_kept(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    sessions = _store(engine)
    with sessions() as session, session.begin():
        for i in range(10):
            events.record(session, EventType.COMPUTE, 1, f"c{i}", f"c{i}", None, "Creating", at=100.0 + i)
    with sessions() as session:
        seqs = [e.seq for e in feed.page(session, 1, feed.EventFilter()).events]
    assert len(seqs) == 10
    with sessions.begin() as session:  # keep the last 4 (count) and those of the last 8 s (age)
        assert feed.prune(session, Retention(max_age_s=8.0, max_events=4), now=110.0) == 6
    kept = seqs[6:]
    with sessions() as session:
        assert [e.seq for e in feed.page(session, 1, feed.EventFilter()).events] == kept
        assert [e.seq for e in feed.page(session, 1, feed.EventFilter(since=kept[0] - 1)).events] == kept
        with pytest.raises(CloudletError) as gone:
            feed.page(session, 1, feed.EventFilter(since=kept[0] - 2))
        assert gone.value.status == 410 and gone.value.details == [{"oldestSeq": kept[0]}]
    with sessions.begin() as session:  # everything aged out: a reader from the oldest goes on from the mark
        feed.prune(session, Retention(max_age_s=1.0, max_events=4), now=1000.0)
    with sessions() as session:
        empty = feed.page(session, 1, feed.EventFilter())
        assert empty.events == [] and empty.last_seq == seqs[-1]
        assert feed.page(session, 1, feed.EventFilter(since=empty.last_seq)).events == []
    engine.dispose()


WRITERS = 8
PER_WRITER = 25


@pytest.mark.postgres
def test_postgres_concurrent_writers_never_let_a_reader_skip_a_seq(postgres_url: str) -> None:
    """Each writer takes its seqs and then holds its transaction open a few ms before committing
    (as a slow transaction would); a reader polls ``since=<last seen>`` all along. Without the
    commit-order lock the reader would move past a seq that commits later, and never see it."""
    engine = create_engine(db.normalise_url(postgres_url), pool_size=WRITERS + 2)
    sessions = _store(engine)
    seen: list[int] = []
    done = threading.Event()

    def write(writer: int) -> None:
        rng = random.Random(writer)
        for i in range(PER_WRITER):
            with sessions() as session, session.begin():
                events.record(session, EventType.JOB, 1, f"w{writer}-{i}", "cpu", None, "Queued")
                events.insert_pending(session)  # the seq is taken here; the commit comes later
                time.sleep(rng.uniform(0, 0.01))

    def read() -> None:
        since = 0
        while True:
            finished = done.is_set()  # read once more after the writers finished
            with sessions() as session:
                page = feed.page(session, 1, feed.EventFilter(since=since, limit=1000))
            seen.extend(e.seq for e in page.events)
            since = page.last_seq
            if finished:
                return

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()
    with sessions() as session:
        stored = list(session.scalars(select(LifecycleEvent.seq).order_by(LifecycleEvent.seq)))
    assert len(stored) == WRITERS * PER_WRITER
    assert seen == stored  # every one, once, in order
    engine.dispose()
