"""The job-schedule loop on a real store with a fake clock (control/job_schedules.py): a due
schedule makes one job per fire time, tagged with its schedule; after downtime it fires once; a
schedule that cannot make its job has the reason recorded and the others still fire; a disabled
one does not fire; a fire that never committed is made once later, and one whose job exists is
recorded without a second job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.job_schedules import JobScheduleLoop
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.jobs import schedules as service
from cloudlet.store.schema import Job, JobSchedule, Subscription, Workspace
from tests.unit.control_fakes import FakeClock, new_store

ADMIN = Caller(principal_id=1, name="alice", is_admin=True)
START = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC, a minute boundary


def schedule(name: str, compute: str = "local", expression: str = "* * * * *") -> dict[str, Any]:
    job = {
        "type": "command",
        "command": "echo hi",
        "compute": compute,
    }
    return {"name": name, "trigger": {"type": "cron", "expression": expression}, "create_job": job}


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.sessions: sessionmaker[Session]
        self.sessions, _ = new_store(tmp_path / "home")
        with self.sessions() as session:
            sub = session.scalars(select(Subscription)).one()
            self.ref = WorkspaceRef(sub.id, "default", "default")
        self.clock = FakeClock(START)
        self.rescaled = 0
        self.loop = JobScheduleLoop(
            self.sessions,
            "replica-a",
            DataRoot(tmp_path / "data"),
            NodeNotifier(),
            lambda: "http://127.0.0.1:1",
            self._rescale,
            clock=self.clock,
        )

    def _rescale(self) -> None:
        self.rescaled += 1

    def create(self, body: dict[str, Any]) -> None:
        with self.sessions() as session:
            service.create_or_update(session, self.ref, ADMIN, body["name"], body, clock=self.clock)

    def jobs(self) -> dict[str, dict[str, Any]]:
        with self.sessions() as session:
            return {job.name: job.spec for job in session.scalars(select(Job))}

    def row(self, name: str) -> JobSchedule:
        with self.sessions() as session:
            found = session.scalars(select(JobSchedule).where(JobSchedule.name == name)).one()
            session.expunge(found)
            return found


def test_a_due_schedule_makes_one_job_per_fire_time_tagged_with_its_schedule(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.create(schedule("every-minute"))
    world.loop.run_pass()
    assert world.jobs() == {}  # created at 08:00:00: its first fire is 08:01
    world.clock.advance(61)
    world.loop.run_pass()
    world.loop.run_pass()  # the same minute again: nothing more
    jobs = world.jobs()
    assert list(jobs) == ["every-minute-202701150801"]
    assert jobs["every-minute-202701150801"]["properties"] == {"azureml.scheduleName": "every-minute"}
    row = world.row("every-minute")
    assert row.last_job_name == "every-minute-202701150801" and row.last_error is None
    assert row.next_fire_at == START + 120


def test_after_downtime_a_schedule_fires_once_then_moves_on(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.create(schedule("every-minute"))
    world.clock.advance(5 * 60 + 30)  # down from 08:00 to 08:05:30: five fire times missed
    world.loop.run_pass()
    assert list(world.jobs()) == ["every-minute-202701150805"]
    world.clock.advance(31)
    world.loop.run_pass()
    assert sorted(world.jobs()) == ["every-minute-202701150805", "every-minute-202701150806"]


def test_a_failing_schedule_is_recorded_and_never_stops_the_others(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.create(schedule("a-broken", compute="no-such-cluster"))
    world.create(schedule("b-fine"))
    world.clock.advance(61)
    world.loop.run_pass()
    assert list(world.jobs()) == ["b-fine-202701150801"]
    broken = world.row("a-broken")
    assert broken.last_error is not None and "no-such-cluster" in broken.last_error
    assert broken.next_fire_at == START + 120  # that fire is passed over; the next one is tried


def test_a_disabled_schedule_does_not_fire_and_enabled_again_does_not_replay(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.create(schedule("every-minute"))
    with world.sessions() as session:
        service.set_enabled(session, world.ref, ADMIN, "every-minute", False, clock=world.clock)
    world.clock.advance(3 * 60)
    world.loop.run_pass()
    assert world.jobs() == {}
    with world.sessions() as session:
        service.set_enabled(session, world.ref, ADMIN, "every-minute", True, clock=world.clock)
    world.loop.run_pass()
    assert world.jobs() == {}  # 08:01-08:03 were missed while disabled: not replayed
    world.clock.advance(60)
    world.loop.run_pass()
    assert list(world.jobs()) == ["every-minute-202701150804"]


def test_a_fire_whose_transaction_never_committed_is_made_once_by_the_next_pass(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.create(schedule("every-minute"))
    world.clock.advance(61)
    with world.sessions() as session:  # a server that dies before its commit: nothing of it stays
        [schedule_id] = service.due_ids(session, world.clock.now())
        fired = service.fire(session, schedule_id, world.clock.now(), world.loop.data)
        assert fired.job is not None
        session.rollback()
    assert world.jobs() == {}
    world.loop.run_pass()
    world.loop.run_pass()
    assert list(world.jobs()) == ["every-minute-202701150801"]


def test_a_fire_whose_job_exists_already_is_recorded_without_a_second_job(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.create(schedule("every-minute"))
    with world.sessions() as session:
        workspace = session.scalars(select(Workspace)).one()
        prepared = job_service.prepare(
            {"command": "echo made earlier", "compute": "local"}, "every-minute-202701150801"
        )
        job_service.submit(session, workspace, "every-minute-202701150801", prepared, ADMIN, world.loop.data)
        session.commit()
    world.clock.advance(61)
    world.loop.run_pass()
    assert world.jobs()["every-minute-202701150801"]["command"] == "echo made earlier"
    row = world.row("every-minute")
    assert row.last_job_name == "every-minute-202701150801" and row.last_error is None
    assert row.next_fire_at == START + 120


def test_a_pipeline_schedule_fires_a_pipeline_job_tagged_with_its_schedule(tmp_path: Path) -> None:
    world = World(tmp_path)
    pipeline = {
        "type": "pipeline",
        "display_name": "nightly pipeline",
        "jobs": {"hello": {"type": "command", "command": "echo hello", "compute": "local"}},
    }
    world.create(
        {"name": "nightly", "trigger": {"type": "cron", "expression": "* * * * *"}, "create_job": pipeline}
    )
    world.clock.advance(61)
    world.loop.run_pass()
    [(name, spec)] = world.jobs().items()
    assert name == "nightly-202701150801" and spec["type"] == "pipeline", spec
    assert spec["properties"] == {"azureml.scheduleName": "nightly"}
    assert world.row("nightly").last_error is None


def test_an_update_that_keeps_the_trigger_keeps_a_due_fire(tmp_path: Path) -> None:
    world = World(tmp_path)
    world.create(schedule("every-minute"))
    world.clock.advance(61)  # 08:01 is due; no pass yet
    same = schedule("every-minute")
    same["trigger"] = {**same["trigger"], "time_zone": "UTC"}  # as the ARM facade gives it back
    world.create({**same, "tags": {"team": "vision"}})
    world.loop.run_pass()
    assert list(world.jobs()) == ["every-minute-202701150801"]
