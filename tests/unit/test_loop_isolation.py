"""One bad item never stops a loop for everyone (issue 24, defect 2).

Each control loop that works over items from the store is given one item it cannot handle (a job
row in an impossible state, a parent job whose document is garbage) beside one it can: the pass
goes on with the good one, and the bad one says why on itself. Before the fix the serverless pass
recorded every job's nodes before its per-job protection, so one lost node whose job could not be
requeued (``IllegalJobTransition``) failed every serverless job's pass; the cluster pass likewise
failed a whole cluster for one node. Real store in a tmp dir, fake clock and provider.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.control.instance_watch import InstanceWatch
from cloudlet.control.online_replicas import DeploymentState, EndpointState, OnlineRuntime, Replica
from cloudlet.control.parent_jobs import ParentJobLoop
from cloudlet.control.reconciler import OperationReconciler
from cloudlet.control.steps import AfterCommitQueue, StepRegistry
from cloudlet.domain.compute.nodes import LOST_AFTER_S, NodeEvent, NodeState
from cloudlet.domain.endpoints.online_endpoints import DeploymentSpec
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.context import Caller
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.jobs import jobs as job_service
from cloudlet.store.schema import Compute, Job, JobRun, Node, Operation, Workspace
from tests.unit.control_fakes import SIZE, FakeProvider, add_cluster
from tests.unit.test_control_reconcilers import World

CALLER = Caller(principal_id=0, name="test", is_admin=False)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path, {"local": FakeProvider()})
    yield made
    made.reconciler.stop()


def _job(
    world: World,
    session: Session,
    name: str,
    compute: str | None,
    status: str,
    attempt: int,
    spec: dict[str, Any],
) -> Job:
    ws = session.scalars(select(Workspace)).one()
    job = Job(
        workspace_id=ws.id,
        name=name,
        compute_name=compute,
        spec=spec,
        status=status,
        priority=2,
        instance_count=1,
        attempt=attempt,
        max_attempts=3,
        cancel_requested=False,
        created_by="test",
        submitted_at=world.clock.now(),
    )
    session.add(job)
    session.flush()
    return job


def _running_on_a_quiet_node(world: World, session: Session, job: Job, owner: Job | Compute) -> str:
    """A busy node whose agent went quiet, running JOB's current attempt: the next pass loses it
    and ends the run, which requeues the job (or cannot, for a job in an impossible state)."""
    node = _idle_node(world, session, owner)
    now = world.clock.now()
    node_service.advance(node, NodeEvent.ASSIGN, now)
    node.current_run = job.name
    session.add(
        JobRun(
            id=f"r-{job.name}",
            job_id=job.id,
            attempt=job.attempt,
            rank=0,
            node_id=node.id,
            state="running",
            spec={"log_name": "user_logs/std_log.txt"},
            assigned_at=now,
            started_at=now,
        )
    )
    return node.id


def _status(world: World, name: str) -> str:
    with world.sessions() as session:
        return str(session.scalars(select(Job.status).where(Job.name == name)).one())


def _bad_node_says_why(world: World, node_id: str) -> None:
    node = world.node(node_id)
    assert node.state == NodeState.BUSY.value, "its writes were undone: it is as it was"
    assert node.error is not None and node.error["code"] == "ReconcileFailed", node.error
    assert "IllegalJobTransition" in node.error["message"]


def cluster_case(world: World) -> Callable[[], None]:
    """Two lost nodes of one cluster: one runs a job that is Queued (impossible: its run is
    live), the other a Running job, which is requeued all the same."""
    add_cluster(world.sessions, "mixed", max_instances=2)
    with world.sessions.begin() as session:
        mixed = session.scalars(select(Compute).where(Compute.name == "mixed")).one()
        spec = {"command": "true", "compute": "azureml:mixed"}
        bad = _job(world, session, "impossible", "mixed", "Queued", 1, spec)
        good = _job(world, session, "ordinary", "mixed", "Running", 1, spec)
        bad_node = _running_on_a_quiet_node(world, session, bad, mixed)
        _running_on_a_quiet_node(world, session, good, mixed)
    world.clock.advance(LOST_AFTER_S + 1)
    world.reconciler.run_once(world.clock.now())

    def check() -> None:
        assert _status(world, "ordinary") == "Queued", "the good job was requeued"
        _bad_node_says_why(world, bad_node)

    return check


def placement_case(world: World) -> Callable[[], None]:
    """Two queued jobs and two idle nodes: one job was stored before a limit it breaks existed
    (a TensorFlow job of 300 workers), so its runs cannot be made. It fails, alone, saying why;
    the other is placed in the same pass."""
    add_cluster(world.sessions, "pool2", max_instances=2)
    tf = {"type": "tensorflow", "worker_count": 300}
    with world.sessions.begin() as session:
        pool = session.scalars(select(Compute).where(Compute.name == "pool2")).one()
        for _ in range(2):
            _idle_node(world, session, pool)
        _job(world, session, "a-too-big", "pool2", "Queued", 0, {"command": "true", "distribution": tf})
        _job(world, session, "b-ordinary", "pool2", "Queued", 0, {"command": "true"})
    world.reconciler.run_once(world.clock.now())

    def check() -> None:
        with world.sessions() as session:
            bad = session.scalars(select(Job).where(Job.name == "a-too-big")).one()
        assert _status(world, "b-ordinary") == "Preparing", "the other job was placed"
        assert bad.status == "Failed" and bad.error is not None, (bad.status, bad.status_message)
        assert bad.error["code"] == "JobCanNeverRun" and "worker_count" in bad.error["message"], bad.error

    return check


def _idle_node(world: World, session: Session, owner: Job | Compute) -> Node:
    size = catalogue_service.current(session).get(SIZE)
    assert size is not None
    node, _ = node_service.new_node(
        session,
        owner=owner,
        installation_id=world.installation_id,
        location="local",
        size=size,
        tier="dedicated",
        now=world.clock.now(),
    )
    for event in (NodeEvent.ALLOCATE, NodeEvent.BOOT, NodeEvent.REGISTER):
        node_service.advance(node, event, world.clock.now())
    node.last_heartbeat = world.clock.now()
    return node


def serverless_case(world: World) -> Callable[[], None]:
    """A serverless job in an impossible state on a lost node; another serverless job still gets
    its node made."""
    spec = {"command": "true", "resources": {"instance_type": SIZE, "instance_count": 1}}
    with world.sessions.begin() as session:
        bad = _job(world, session, "impossible", job_service.SERVERLESS, "Queued", 1, spec)
        bad_node = _running_on_a_quiet_node(world, session, bad, bad)
        _job(world, session, "waiting", job_service.SERVERLESS, "Queued", 0, spec)
    world.clock.advance(LOST_AFTER_S + 1)
    world.reconciler.run_once(world.clock.now())

    def check() -> None:
        with world.sessions() as session:
            waiting = session.scalars(select(Job).where(Job.name == "waiting")).one()
            made = session.scalars(select(Node).where(Node.owner_id == waiting.id)).all()
        assert len(made) == 1, "the good job's node was made"
        _bad_node_says_why(world, bad_node)

    return check


def parents_case(world: World) -> Callable[[], None]:
    """A sweep whose stored document is garbage beside a sound one: the sound one starts its
    trials; the garbage one says why it did not advance (or fails)."""
    sweep = {
        "type": "sweep",
        "trial": {"command": "python t.py --b ${{search_space.b}}"},
        "compute": "azureml:pool",
        "sampling_algorithm": "random",
        "search_space": {"b": {"type": "choice", "values": [1, 2]}},
        "objective": {"goal": "minimize", "primary_metric": "m"},
        "limits": {"max_total_trials": 2, "max_concurrent_trials": 2},
    }
    with world.sessions.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        broken = _job(world, session, "a-broken-sweep", None, "Queued", 0, {"type": "sweep", "trial": 42})
        broken.kind = "sweep"
        prepared = job_service.prepare(sweep, "sound-sweep")
        job_service.submit(session, ws, "sound-sweep", prepared, CALLER, world.data)
    loop = ParentJobLoop(
        world.sessions, "replica-1", world.data, NodeNotifier(), lambda: "http://127.0.0.1:9", lambda: None
    )
    loop.run_pass()

    def check() -> None:
        with world.sessions() as session:
            sound = session.scalars(select(Job).where(Job.name == "sound-sweep")).one()
            kids = session.scalars(select(Job).where(Job.parent_job_id == sound.id)).all()
            broken_row = session.scalars(select(Job).where(Job.name == "a-broken-sweep")).one()
        assert len(kids) == 2, "the sound sweep started its trials"
        assert broken_row.status == "Queued", "it stays as it was, and says why"
        assert (broken_row.status_message or "").startswith("could not advance: KeyError")

    return check


def _instance(session: Session, name: str, spec: dict[str, Any]) -> None:
    ws = session.scalars(select(Workspace)).one()
    now = datetime.now(UTC)
    session.add(
        Compute(
            workspace_id=ws.id,
            name=name,
            type="computeinstance",
            location="local",
            size=SIZE,
            spec=spec,
            state="Stopped",
            created_by="test",
            provisioning_state="Succeeded",
            current_node_count=0,
            errors=[],
            warnings=[],
            created_on=now,
            last_modified_on=now,
        )
    )


def instance_watch_case(world: World) -> Callable[[], None]:
    """An instance whose stored schedules are garbage beside one with a sound schedule: the
    sound one's schedule is looked at; the garbage one says why on its errors."""
    start = [{"action": "start", "trigger": {"type": "cron", "expression": "0 12 * * *"}}]
    with world.sessions.begin() as session:
        _instance(session, "garbled", {"schedules": {"compute_start_stop": "every day, roughly"}})
        _instance(session, "scheduled", {"schedules": {"compute_start_stop": start}})
    InstanceWatch(world.sessions, "replica-1", world.data, clock=world.clock).run_pass()

    def check() -> None:
        with world.sessions() as session:
            rows = {
                c.name: c for c in session.scalars(select(Compute).where(Compute.type == "computeinstance"))
            }
        assert rows["scheduled"].schedule_checked_at is not None, "the sound instance was looked at"
        assert [e["code"] for e in rows["garbled"].errors] == ["ReconcileFailed"], rows["garbled"].errors
        assert "could not look after this instance" in rows["garbled"].errors[0]["message"]

    return check


class _Process:
    """A replica's process: ended (exit 1), or one whose state cannot be read (BROKEN)."""

    def __init__(self, broken: bool = False) -> None:
        self.broken, self.stopped, self.pid, self.returncode = broken, False, 0, 1

    def poll(self) -> int | None:
        if self.broken:
            raise OSError("the process table cannot be read")
        return 1

    def stop(self) -> None:
        self.stopped = True


def online_liveness_case(world: World) -> Callable[[], None]:
    """A replica whose process cannot be looked at beside one whose process ended: the ended one
    is still retired (it would be restarted); the watch thread lives on."""
    runtime = OnlineRuntime(world.sessions, world.data, world.data.root.parent / "home")
    probe = {"initial_delay": 0, "period": 10, "timeout": 1, "failure_threshold": 3}
    spec = DeploymentSpec("blue", "ep", "model", "code", "score.py", None, SIZE, 2, {}, probe, {"timeout": 1})
    unreadable, ended = _Process(broken=True), _Process()
    replicas = [Replica(1, unreadable, Path("/dev/null")), Replica(2, ended, Path("/dev/null"))]
    deployment = DeploymentState(1, "blue", spec, replicas=replicas)
    runtime.endpoints[(1, "ep")] = EndpointState(
        1, 1, "ep", "key", "a", "b", {"blue": 100}, {}, {"blue": deployment}
    )
    try:
        runtime.watch_once()
        retired = [r.retired for r in replicas]  # before stopping the runtime retires them all
    finally:
        runtime.stop()

    def check() -> None:
        assert retired == [False, True] and ended.stopped, "the ended replica was retired"

    return check


class _Widgets(AfterCommitQueue):
    """A resource type whose one step fails for the widget named ``bad``."""

    resource_type = "widgets"
    plans = {"create": ("make",)}

    def load(self, session: Session, op: Operation) -> str:
        return op.resource_name

    def gone(self, op: Operation) -> dict[str, Any]:
        return {"code": "NotFound", "message": "gone"}

    def apply(self, session: Session, op: Operation, step: str, target: str) -> None:
        if target == "bad":
            raise RuntimeError("this widget's record is corrupt")


def operations_case(world: World) -> Callable[[], None]:
    """An operation whose step raises beside one whose step works: the other one ends."""
    with world.sessions.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        for name in ("bad", "good"):
            session.add(
                Operation(
                    id=f"op-{name}",
                    workspace_id=ws.id,
                    resource_type="widgets",
                    resource_id=1,
                    resource_name=name,
                    kind="create",
                    status="InProgress",
                    step="make",
                    created_by="test",
                    created_on=datetime.now(UTC),
                )
            )
    OperationReconciler(world.sessions, "replica-1", StepRegistry(_Widgets())).run_pass()

    def check() -> None:
        with world.sessions() as session:
            status = {op.id: op.status for op in session.scalars(select(Operation))}
        assert status == {"op-bad": "InProgress", "op-good": "Succeeded"}, status

    return check


@pytest.mark.parametrize(
    "case",
    [
        cluster_case,
        placement_case,
        serverless_case,
        parents_case,
        instance_watch_case,
        online_liveness_case,
        operations_case,
    ],
    ids=lambda c: c.__name__,
)
def test_one_bad_item_does_not_stop_the_loop(
    world: World, case: Callable[[World], Callable[[], None]]
) -> None:
    case(world)()
