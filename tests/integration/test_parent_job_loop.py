"""The parent-job loop (control/parent_jobs.py, services/jobs/parent_jobs.py) over a real SQLite store.

The kinds that run here (pipelines, sweeps) have their own end-to-end tests against a real server
and agents; these drive the loop itself with a two-step kind defined below (``StepsInOrder``),
so what the shell does — submit, hand off, reuse, cancel, fail, isolate — is checked apart from
what any one kind decides.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from cloudlet.control.parent_jobs import ParentJobLoop
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView, NewChild, ParentContext, ParentStep
from cloudlet.domain.jobs.parent_kinds import KINDS
from cloudlet.server import open_store
from cloudlet.services.core import effects
from cloudlet.services.core.context import Caller
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import exits
from cloudlet.services.jobs import jobs as job_service
from cloudlet.services.jobs.job_status import set_status
from cloudlet.store.schema import Job, Workspace


class StepsInOrder:
    """A test kind: runs ``steps`` (names) one after another on ``compute``; fails when one fails."""

    def parse(self, doc: Any, name: str) -> dict[str, Any]:
        return {"type": "pipeline", "name": name, **{k: v for k, v in doc.items() if k != "type"}}

    def metric_keys(self, doc: Mapping[str, Any]) -> Sequence[str]:
        return ()

    def advance(
        self, doc: Mapping[str, Any], children: Sequence[ChildView], context: ParentContext
    ) -> ParentStep:
        if doc.get("explode"):
            raise RuntimeError("this kind cannot advance")
        done = {child.key: child for child in children}
        for child in children:
            if child.status is JobStatus.FAILED:
                return ParentStep(outcome=JobStatus.FAILED, message=f"step {child.key} failed: {child.error}")
        for step in doc["steps"]:
            child = done.get(step)
            if child is None:
                command = {"command": f"echo {step}", "compute": doc.get("compute", "azureml:batch")}
                return ParentStep(
                    submit=(NewChild(step, command, reuse_key=f"key-{step}"),), progress=f"at {step}"
                )
            if child.status is not JobStatus.COMPLETED:
                return ParentStep(progress=f"at {step}")
        return ParentStep(outcome=JobStatus.COMPLETED, message="all steps completed")


@pytest.fixture
def steps_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test kind in the pipeline kind's place, for this test only."""
    monkeypatch.setitem(KINDS, JobKind.PIPELINE, StepsInOrder())


class World:
    def __init__(self, home: Path) -> None:
        self.sessions = open_store(home, None).control
        self.data = DataRoot(home / "data")
        self.rescales = 0
        self.loop = ParentJobLoop(
            self.sessions, "replica-a", self.data, NodeNotifier(), lambda: "http://test", self._rescale
        )
        self.woken = threading.Event()
        effects.Publisher(on_parent_work=self.woken.set).install(self.sessions)
        with self.sessions.begin() as session:
            self.ws_id = session.scalars(select(Workspace.id)).one()
        _cluster(self.sessions)

    def _rescale(self) -> None:
        self.rescales += 1

    def submit(self, name: str, doc: dict[str, Any]) -> None:
        prepared = job_service.prepare({"type": "pipeline", **doc}, name)
        with self.sessions.begin() as session:
            ws = session.get(Workspace, self.ws_id)
            assert ws is not None
            job_service.submit(session, ws, name, prepared, Caller(0, "tester", True), self.data)

    def job(self, name: str) -> Job:
        with self.sessions() as session:
            found = session.scalars(select(Job).where(Job.name == name)).one()
            session.expunge(found)
            return found

    def children(self, parent: str) -> list[Job]:
        with self.sessions() as session:
            parent_id = session.scalars(select(Job.id).where(Job.name == parent)).one()
            rows = list(session.scalars(select(Job).where(Job.parent_job_id == parent_id).order_by(Job.id)))
            for row in rows:
                session.expunge(row)
            return rows

    def finish(self, name: str, to: JobStatus = JobStatus.COMPLETED) -> None:
        """The child ran and ended (as its agent's exit report would settle it)."""
        with self.sessions.begin() as session:
            job = session.scalars(select(Job).where(Job.name == name)).one()
            if job.status == JobStatus.QUEUED.value:
                set_status(job, JobStatus.PREPARING, time.time())
            error = {"code": "UserError", "message": "exit code 3"} if to is JobStatus.FAILED else None
            set_status(job, to, time.time(), error=error)

    def cancel(self, name: str) -> None:
        with self.sessions.begin() as session:
            job = session.scalars(select(Job).where(Job.name == name)).one()
            exits.cancel_job(session, job)


def _cluster(sessions: Any) -> None:
    from cloudlet.store.schema import Installation
    from tests.integration.test_dispatch_batcher import _cluster_with_idle_node

    with sessions() as session:
        installation = session.scalars(select(Installation.id)).one()
    _cluster_with_idle_node(sessions, Path("."), installation)


def test_steps_start_one_after_another_and_the_parent_settles(tmp_path: Path, steps_kind: None) -> None:
    world = World(tmp_path)
    world.submit("p1", {"steps": ["a", "b"]})
    assert world.woken.is_set(), "submitting a parent did not wake the loop"
    world.woken.clear()
    world.loop.run_pass()
    kids = world.children("p1")
    assert [(k.child_key, k.name) for k in kids] == [("a", "p1-a")]
    assert kids[0].status == JobStatus.PREPARING.value, "the idle node did not take the first step at once"
    assert world.job("p1").status in (JobStatus.PREPARING.value, JobStatus.RUNNING.value)
    world.loop.run_pass()  # a repeated pass submits nothing new
    assert len(world.children("p1")) == 1
    world.finish("p1-a")
    assert world.woken.is_set(), "a child's move did not wake the loop"
    world.loop.run_pass()
    assert [k.child_key for k in world.children("p1")] == ["a", "b"]
    world.finish("p1-b")
    world.loop.run_pass()
    parent = world.job("p1")
    assert parent.status == JobStatus.COMPLETED.value, parent.status_message
    assert parent.status_message == "all steps completed"
    with world.sessions() as session:
        ws = session.get(Workspace, world.ws_id)
        assert ws is not None
        page = job_service.list_jobs(session, ws, parent="p1")
        assert sorted(job.name for job in page.jobs) == ["p1-a", "p1-b"]


def test_an_unchanged_step_is_reused_and_force_rerun_runs_it(tmp_path: Path, steps_kind: None) -> None:
    world = World(tmp_path)
    world.submit("first", {"steps": ["a"]})
    world.loop.run_pass()
    world.finish("first-a")
    world.loop.run_pass()
    assert world.job("first").status == JobStatus.COMPLETED.value
    world.submit("again", {"steps": ["a"]})
    world.loop.run_pass()
    (reused,) = world.children("again")
    assert reused.status == JobStatus.COMPLETED.value and reused.reused_from == "first-a"
    world.loop.run_pass()
    assert world.job("again").status == JobStatus.COMPLETED.value
    world.submit("forced", {"steps": ["a"], "settings": {"force_rerun": True}})
    world.loop.run_pass()
    (ran,) = world.children("forced")
    assert ran.reused_from is None and ran.status != JobStatus.COMPLETED.value


def test_cancelling_the_parent_cancels_its_children(tmp_path: Path, steps_kind: None) -> None:
    world = World(tmp_path)
    world.submit("p", {"steps": ["a", "b"]})
    world.loop.run_pass()
    world.cancel("p")
    world.loop.run_pass()
    (child,) = world.children("p")
    assert child.cancel_requested, "the running step was not asked to stop"
    assert world.job("p").status not in (JobStatus.CANCELED.value,), "settled before its step stopped"
    world.finish("p-a", JobStatus.CANCELED)  # the agent stopped it
    world.loop.run_pass()
    assert world.job("p").status == JobStatus.CANCELED.value


def test_a_failed_step_fails_the_parent_with_its_error(tmp_path: Path, steps_kind: None) -> None:
    world = World(tmp_path)
    world.submit("p", {"steps": ["a", "b"]})
    world.loop.run_pass()
    world.finish("p-a", JobStatus.FAILED)
    world.loop.run_pass()
    parent = world.job("p")
    assert parent.status == JobStatus.FAILED.value
    assert parent.status_message == "step a failed: exit code 3"
    assert [k.child_key for k in world.children("p")] == ["a"]


def test_a_child_that_cannot_be_submitted_fails_its_parent(tmp_path: Path, steps_kind: None) -> None:
    world = World(tmp_path)
    world.submit("p", {"steps": ["a"], "compute": "azureml:no-such-cluster"})
    world.loop.run_pass()
    parent = world.job("p")
    assert parent.status == JobStatus.FAILED.value
    assert "no-such-cluster" in (parent.status_message or "")
    assert world.children("p") == []


def test_one_parent_that_cannot_advance_does_not_stop_the_others(tmp_path: Path, steps_kind: None) -> None:
    world = World(tmp_path)
    world.submit("broken", {"steps": ["a"], "explode": True})
    world.submit("fine", {"steps": ["a"]})
    world.loop.run_pass()
    assert "cannot advance" in (world.job("broken").status_message or "")
    assert [k.child_key for k in world.children("fine")] == ["a"]


def test_a_parent_type_without_its_kind_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(KINDS, JobKind.SWEEP, raising=False)  # as on a server without sweeps
    with pytest.raises(Exception, match="job type 'sweep' is not supported yet") as caught:
        job_service.prepare({"type": "sweep", "trial": {}}, "s")
    assert getattr(caught.value, "target", None) == "type"
