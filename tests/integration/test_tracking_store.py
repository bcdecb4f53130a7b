"""The tracking service on a real store (SQLite and PostgreSQL): what sweeps and ``job show`` read
by job id (latest metrics, a metric's history in step order, params), a job's run made on its
first write in its job's experiment, NaN kept apart from numbers, params written once."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from cloudlet.domain.errors import CloudletError
from cloudlet.services.core.clock import utcnow
from cloudlet.services.tracking import tracking
from cloudlet.services.tracking.tracking import MetricIn
from cloudlet.store import db
from cloudlet.store.schema import Job, ResourceGroup, Subscription, Workspace
from tests.jobs_helpers import wait_until


def _store(engine: Engine) -> list[int]:
    db.migrate(engine)
    with db.session_factory(engine)() as session, session.begin():
        for parent in (
            Subscription(id="s", display_name="s"),
            ResourceGroup(id=1, subscription_id="s", name="rg", location="l"),
            Workspace(id=1, resource_group_id=1, name="ws", location="l", tags={}, created_on=utcnow()),
        ):
            session.add(parent)
            session.flush()
        jobs = [
            Job(
                workspace_id=1,
                name=name,
                compute_name="cpu",
                spec={"type": "command", "command": "true", "experiment_name": "exp"},
                status="Running",
                created_by="alice",
                submitted_at=1.0,
            )
            for name in ("a", "b", "quiet")
        ]
        session.add_all(jobs)
        session.flush()
        return [job.id for job in jobs]


def _reads_by_job_id(engine: Engine) -> None:
    a, b, quiet = _store(engine)
    sessions = db.session_factory(engine)
    with sessions() as session, session.begin():
        ws = session.get(Workspace, 1)
        assert ws is not None
        run_a = tracking.run_for_write(session, ws, "a")
        assert run_a.experiment is not None and run_a.experiment.name == "exp"
        tracking.log(
            session,
            run_a,
            [MetricIn("loss", 1.0, 10, 0), MetricIn("loss", 0.5, 11, 2), MetricIn("loss", 0.7, 12, 1)],
            [("lr", "0.1")],
            [("team", "x")],
        )
        tracking.log(session, run_a, [MetricIn("loss", 0.4, 9, 2), MetricIn("acc", math.nan, 13, 0)])
        run_b = tracking.run_for_write(session, ws, "b")
        tracking.log(session, run_b, [MetricIn("loss", 2.0, 5, 0)], [("lr", "0.2")])
        tracking.log(session, run_a, params_in=[("lr", "0.1")])  # the same value again: fine
        with pytest.raises(CloudletError, match="already logged"):
            tracking.log(session, run_a, params_in=[("lr", "0.3")])
    with sessions() as session:
        latest = tracking.latest_metrics(session, [a, b, quiet])
        assert latest[a]["loss"] == 0.5  # step 2, the later timestamp of the two
        assert math.isnan(latest[a]["acc"])
        assert latest[b] == {"loss": 2.0} and quiet not in latest
        assert tracking.metric_history(session, [a, b], "loss") == {
            a: [(0, 1.0), (1, 0.7), (2, 0.4), (2, 0.5)],
            b: [(0, 2.0)],
        }
        assert tracking.params(session, a) == {"lr": "0.1"} and tracking.params(session, quiet) == {}
        assert tracking.latest_metrics(session, []) == {}


def test_sqlite_reads_by_job_id(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    _reads_by_job_id(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_reads_by_job_id(postgres_url: str) -> None:
    engine = create_engine(db.normalise_url(postgres_url))
    _reads_by_job_id(engine)
    engine.dispose()


@pytest.mark.postgres
def test_postgres_two_ranks_first_writes_race(postgres_url: str) -> None:
    """Two processes of one job log their first value of one metric at once: the one that loses
    the insert race (of the run's row, then of the latest value) finds the winner's and goes on."""
    engine = create_engine(db.normalise_url(postgres_url))
    a, *_ = _store(engine)
    sessions = db.session_factory(engine)
    first = sessions()
    first.begin()
    ws = first.get(Workspace, 1)
    assert ws is not None
    tracking.log(first, tracking.run_for_write(first, ws, "a"), [MetricIn("loss", 1.0, 10, 0)])
    done: list[object] = []

    def second() -> None:
        try:
            with sessions() as session, session.begin():
                other = session.get(Workspace, 1)
                assert other is not None
                run = tracking.run_for_write(session, other, "a")
                tracking.log(session, run, [MetricIn("loss", 2.0, 11, 1)])
            done.append("second")
        except Exception as exc:  # reported by the assertion below
            done.append(exc)

    thread = threading.Thread(target=second)
    thread.start()
    waiting = (
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE wait_event_type = 'Lock' AND datname = current_database()"
    )

    def second_waits() -> bool:
        # A transaction of its own each time: pg_stat_activity is read once per transaction.
        with engine.connect() as probe:
            return not thread.is_alive() or bool(probe.execute(text(waiting)).scalar())

    wait_until(second_waits, 30, "the second to wait on the first's uncommitted run row")
    assert not done, f"the second did not wait for the first: {done}"
    first.commit()
    first.close()
    thread.join(30)
    assert done == ["second"]
    with sessions() as session:
        assert tracking.latest_metrics(session, [a]) == {a: {"loss": 2.0}}
        assert tracking.metric_history(session, [a], "loss") == {a: [(0, 1.0), (1, 2.0)]}
    engine.dispose()
