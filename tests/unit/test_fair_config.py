"""Teams in the store → the scheduler's fair-share configuration (``services/jobs/fair_config``),
and the team use cases' store-side checks (``services/access/teams``), on a real migrated SQLite
store: a compute's own shares win over its location's, users map to teams, the default team is
listed only while one of its users has a job on the compute, and the half-life setting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.domain.access.teams import TeamDocument
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import fair_share
from cloudlet.services.access import identity, teams
from cloudlet.services.core.context import Caller
from cloudlet.services.jobs import fair_config
from cloudlet.store.schema import AuditEntry, Compute, Job
from tests.unit.control_fakes import add_cluster, new_store

ADMIN = Caller(principal_id=0, name="root", is_admin=True)


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    made, _ = new_store(tmp_path / "home")
    with made.begin() as session:
        for user in ("alice", "bob", "carol", "dave"):
            identity.create_principal(session, user, "test")
    return made


def put(sessions: sessionmaker[Session], name: str, **doc: Any) -> dict[str, Any]:
    with sessions() as session:
        shown, _ = teams.put_team(session, ADMIN, name, TeamDocument.model_validate(doc))
        return shown


def config_of(sessions: sessionmaker[Session], compute: str) -> fair_share.FairShareConfig | None:
    with sessions() as session:
        row = session.scalars(select(Compute).where(Compute.name == compute)).one()
        return fair_config.for_compute(session, row)


def refused(sessions: sessionmaker[Session], name: str, **doc: Any) -> CloudletError:
    with pytest.raises(CloudletError) as caught:
        put(sessions, name, **doc)
    return caught.value


def test_no_shares_no_config(sessions: sessionmaker[Session]) -> None:
    add_cluster(sessions, "c1")
    assert config_of(sessions, "c1") is None


def test_location_shares_apply_until_the_compute_has_its_own(sessions: sessionmaker[Session]) -> None:
    add_cluster(sessions, "c1")
    put(sessions, "a", members=["alice"], shares=[{"location": "local", "share": 50}])
    put(sessions, "b", members=["bob"], shares=[{"location": "local", "share": 50, "borrow_limit": 0}])
    config = config_of(sessions, "c1")
    assert config is not None
    assert config.shares() == {"a": 50.0, "b": 50.0}
    assert dict(config.user_teams) == {"alice": "a", "bob": "b"}
    assert [t.borrow_limit for t in config.teams] == [None, 0.0]
    assert config.half_life_s == fair_share.SLURM_HALF_LIFE_S
    # Its own shares win: only team a has one, so bob is in the default team here.
    put(
        sessions,
        "a",
        members=["alice"],
        shares=[{"location": "local", "share": 50}, {"workspace": "default", "compute": "c1", "share": 3}],
    )
    config = config_of(sessions, "c1")
    assert config is not None and config.shares() == {"a": 3.0}
    assert config.team_of("bob") == fair_share.DEFAULT_TEAM


def test_the_default_team_is_weighted_only_while_its_users_have_jobs(sessions: sessionmaker[Session]) -> None:
    add_cluster(sessions, "c1", queued_jobs=1)  # submitted by "test", a user in no team
    put(sessions, "a", members=["alice"], shares=[{"location": "local", "share": 30}])
    put(sessions, "b", members=["bob"], shares=[{"location": "local", "share": 10}])
    config = config_of(sessions, "c1")
    assert config is not None
    assert config.shares() == {"a": 30.0, "b": 10.0, fair_share.DEFAULT_TEAM: 20.0}
    with sessions.begin() as session:
        session.query(Job).update({Job.status: "Completed"})
    config = config_of(sessions, "c1")
    assert config is not None and config.shares() == {"a": 30.0, "b": 10.0}
    # The scheduling pass, which has read the queue, names its users instead of the probe.
    with sessions() as session:
        row = session.scalars(select(Compute).where(Compute.name == "c1")).one()
        given = fair_config.for_compute(session, row, users=["alice", "stranger"])
        assert given is not None and given.shares()[fair_share.DEFAULT_TEAM] == 20.0
        members_only = fair_config.for_compute(session, row, users=["alice", "bob"])
        assert members_only is not None and fair_share.DEFAULT_TEAM not in members_only.shares()


def test_half_life_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fair_config.HALF_LIFE_ENV, "3600")
    assert fair_config.half_life_s() == 3600.0
    monkeypatch.setenv(fair_config.HALF_LIFE_ENV, "0")
    assert fair_config.half_life_s() == 0.0
    for bad in ("-1", "soon", "inf"):
        monkeypatch.setenv(fair_config.HALF_LIFE_ENV, bad)
        assert fair_config.half_life_s() == fair_share.SLURM_HALF_LIFE_S


def test_replace_and_delete_are_audited(sessions: sessionmaker[Session]) -> None:
    shown = put(sessions, "a", description="vision", members=["alice", "bob"])
    assert shown["members"] == ["alice", "bob"] and shown["shares"] == []
    shown = put(sessions, "a", members=["carol"], shares=[{"location": "local", "share": 1.5}])
    assert shown["members"] == ["carol"] and shown["description"] is None
    assert shown["shares"] == [{"location": "local", "share": 1.5, "borrow_limit": None}]
    put(sessions, "b", members=["alice"])  # alice left a: she may join b
    with sessions() as session:
        teams.delete_team(session, ADMIN, "a")
        assert [t["name"] for t in teams.list_teams(session)] == ["b"]
        actions = list(session.scalars(select(AuditEntry.action).where(AuditEntry.target.like("/teams/%"))))
    assert sorted(actions) == ["team.create", "team.create", "team.delete", "team.update"]


def test_store_checks_name_the_field(sessions: sessionmaker[Session]) -> None:
    add_cluster(sessions, "c1")
    error = refused(sessions, "a", members=["alice", "nobody"])
    assert (error.status, error.target, error.code) == (400, "members[1]", "UnknownPrincipal")
    put(sessions, "b", members=["bob"])
    error = refused(sessions, "a", members=["alice", "bob"])
    assert error.status == 409 and "'bob' is already in team 'b'" in error.message and "'a'" in error.message
    error = refused(sessions, "a", shares=[{"location": "mars", "share": 1}])
    assert (error.target, "no location 'mars'" in error.message) == ("shares[0].location", True)
    error = refused(sessions, "a", shares=[{"workspace": "nope", "compute": "c1", "share": 1}])
    assert error.target == "shares[0].workspace"
    error = refused(sessions, "a", shares=[{"workspace": "default", "compute": "c9", "share": 1}])
    assert error.target == "shares[0].compute"
    # All or nothing: no team "a" was left behind by any refusal.
    with sessions() as session:
        assert [t["name"] for t in teams.list_teams(session)] == ["b"]


def test_only_administrators_write(sessions: sessionmaker[Session]) -> None:
    user = Caller(principal_id=1, name="alice", is_admin=False)
    with sessions() as session, pytest.raises(CloudletError) as caught:
        teams.put_team(session, user, "a", TeamDocument())
    assert caught.value.status == 403
