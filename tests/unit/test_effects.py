"""A unit of work's effects are heard once its transaction commits, and never for a rollback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.services.core import effects


class Heard:
    def __init__(self) -> None:
        self.nodes: list[str] = []
        self.calls: list[str] = []
        self.after: int = 0

    def publisher(self) -> effects.Publisher:
        return effects.Publisher(
            wake_node=self.nodes.append,
            on_demand=lambda: self.calls.append("demand"),
            on_operations=lambda: self.calls.append("operations"),
            on_parent_work=lambda: self.calls.append("parents"),
            on_endpoints=lambda: self.calls.append("endpoints"),
            after=lambda _session: setattr(self, "after", self.after + 1),
        )


@pytest.fixture
def world() -> Iterator[tuple[sessionmaker[Session], Heard]]:
    engine = create_engine("sqlite://")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    sessions = sessionmaker(engine)
    heard = Heard()
    heard.publisher().install(sessions)
    yield sessions, heard
    engine.dispose()


def test_a_commit_publishes_what_its_transaction_recorded(world: tuple[sessionmaker[Session], Heard]) -> None:
    sessions, heard = world
    with sessions() as session:
        session.execute(text("INSERT INTO t VALUES (1)"))
        effects.wake_nodes(session, ["n-1", "n-2"])
        effects.demand_changed(session)
        effects.operations_pending(session)
        effects.parent_work(session)
        effects.endpoints_changed(session)
        assert heard.calls == [] and heard.nodes == []  # nothing before the commit
        session.commit()
    assert sorted(heard.nodes) == ["n-1", "n-2"]
    assert heard.calls == ["demand", "operations", "parents", "endpoints"]
    assert heard.after == 1


def test_a_rolled_back_transaction_wakes_nothing(world: tuple[sessionmaker[Session], Heard]) -> None:
    sessions, heard = world
    with sessions() as session:
        effects.wake_nodes(session, ["n-1"])
        effects.demand_changed(session)
        session.rollback()
        session.execute(text("INSERT INTO t VALUES (2)"))
        session.commit()  # the next transaction recorded nothing
    assert heard.nodes == [] and heard.calls == []


def test_a_savepoints_rollback_keeps_the_rest_of_the_transactions_effects(
    world: tuple[sessionmaker[Session], Heard],
) -> None:
    sessions, heard = world
    with sessions() as session:
        effects.wake_nodes(session, ["n-kept"])
        savepoint = session.begin_nested()
        session.execute(text("INSERT INTO t VALUES (3)"))
        savepoint.rollback()  # one item of a loop's pass failed
        effects.demand_changed(session)
        session.commit()
    assert heard.nodes == ["n-kept"]
    assert heard.calls == ["demand"]


def test_each_commit_publishes_only_its_own_effects(world: tuple[sessionmaker[Session], Heard]) -> None:
    sessions, heard = world
    with sessions() as session:
        effects.parent_work(session)
        session.commit()
        session.execute(text("INSERT INTO t VALUES (4)"))
        session.commit()
    assert heard.calls == ["parents"]
    assert heard.after == 2
