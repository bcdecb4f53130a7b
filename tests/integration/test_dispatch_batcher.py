"""Group commit of the dispatch hot path (control/dispatch_batcher.py) over a real SQLite store:
requests that arrive together share one transaction; a refused one leaves nothing behind and
does not take its batch-mates down."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from cloudlet.control.dispatch_batcher import DispatchBatcher
from cloudlet.domain.compute.compute_spec import parse_compute, spec_to_doc
from cloudlet.domain.compute.nodes import NodeState
from cloudlet.domain.errors import CloudletError
from cloudlet.server import open_store
from cloudlet.services.compute import agent_protocol
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.compute.agent_protocol import ExitReport, RunningReport
from cloudlet.services.core.batch import Answer, Round
from cloudlet.services.core.context import Caller
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import jobs as job_service
from cloudlet.store.schema import (
    Compute,
    Installation,
    Job,
    JobRun,
    LifecycleEvent,
    Node,
    Subscription,
    Workspace,
)

SIZE = "Standard_DS3_v2"


def _batcher(home: Path) -> tuple[DispatchBatcher, Any]:
    sessions = open_store(home, None).control
    batcher = DispatchBatcher(
        sessions, DataRoot(home / "data"), lambda: "http://test", NodeNotifier(), lambda: None
    )
    return batcher, sessions


def _subscriptions(sessions: Any, prefix: str) -> set[str]:
    with sessions() as session:
        rows = session.scalars(select(Subscription.id).where(Subscription.id.like(prefix + "%")))
        return set(rows)


async def _in_one_batch(
    batcher: DispatchBatcher, works: list[Callable[[Round], Answer]], start: bool = True
) -> list[Any]:
    """Hold the writer thread with a first request, queue WORKS behind it, then let it go: the
    writer takes them all as its next batch."""
    if start:
        batcher.start(asyncio.get_running_loop())
    entered, gate = threading.Event(), threading.Event()

    def hold(_round: Round) -> Answer:
        entered.set()
        gate.wait(10)
        return lambda _placed: "held"

    first = asyncio.ensure_future(batcher.apply(hold))
    assert await asyncio.to_thread(entered.wait, 10), "the writer never took the first request"
    rest = [asyncio.ensure_future(batcher.apply(work)) for work in works]
    # One turn of the loop runs each new task up to its first await: `apply` has queued its
    # request by then (it queues before awaiting), so all of them wait behind `hold`.
    await asyncio.sleep(0)
    gate.set()
    try:
        return list(await asyncio.gather(first, *rest, return_exceptions=True))[1:]
    finally:
        if start:
            batcher.stop()


def _spied(work: Callable[[Round], Answer], paths: list[str]) -> Callable[[Round], Answer]:
    """WORK, noting what an exit report did with its node: freed it for its cluster's next job,
    carried in the answer ("freed": the compute is in ``freed_on``), or woke nodes ("woken")."""

    def spy(round_: Round) -> Answer:
        before = set(round_.freed_on)
        answer = work(round_)
        paths.append("freed" if round_.freed_on - before else "woken")
        return answer

    return spy


def test_requests_that_arrive_together_share_one_transaction(tmp_path: Path) -> None:
    batcher, sessions = _batcher(tmp_path)
    rounds: list[int] = []

    def add(name: str) -> Callable[[Round], Answer]:
        def work(round_: Round) -> Answer:
            rounds.append(id(round_))
            round_.session.add(Subscription(id=name, display_name=name))
            return lambda _placed: name

        return work

    names = [f"grp-{i}" for i in range(10)]
    answers = asyncio.run(_in_one_batch(batcher, [add(n) for n in names]))
    assert answers == names
    assert len(set(rounds)) == 1, "the ten requests were not applied in one transaction"
    assert _subscriptions(sessions, "grp-") == set(names)


def test_a_refused_request_leaves_nothing_and_spares_its_batch(tmp_path: Path) -> None:
    batcher, sessions = _batcher(tmp_path)
    calls: dict[str, int] = {}

    def add(name: str, refuse: bool = False) -> Callable[[Round], Answer]:
        def work(round_: Round) -> Answer:
            calls[name] = calls.get(name, 0) + 1
            round_.session.add(Subscription(id=name, display_name=name))
            round_.session.flush()  # written, then refused: the write must not survive
            if refuse:
                raise CloudletError("Refused", f"{name} is refused", "name", 409)
            return lambda _placed: name

        return work

    answers = asyncio.run(_in_one_batch(batcher, [add("ok-a"), add("ok-b", refuse=True), add("ok-c")]))
    assert answers[0] == "ok-a" and answers[2] == "ok-c"
    assert isinstance(answers[1], CloudletError) and answers[1].status == 409
    assert _subscriptions(sessions, "ok-") == {"ok-a", "ok-c"}
    # The batch was tried together up to the refusal, then each request alone.
    assert calls == {"ok-a": 2, "ok-b": 2, "ok-c": 1}


def test_a_store_conflict_at_commit_is_replayed_request_by_request(tmp_path: Path) -> None:
    """Two requests in one batch writing the same key: the unique constraint fails the batch's
    flush; replayed alone, the first succeeds and the second gets the store's error."""
    batcher, sessions = _batcher(tmp_path)

    def add(name: str, label: str) -> Callable[[Round], Answer]:
        def work(round_: Round) -> Answer:
            round_.session.add(Subscription(id=name, display_name=label))
            return lambda _placed: label

        return work

    answers = asyncio.run(_in_one_batch(batcher, [add("dup-1", "first"), add("dup-1", "second")]))
    assert answers[0] == "first"
    assert isinstance(answers[1], Exception)
    assert _subscriptions(sessions, "dup-") == {"dup-1"}
    with sessions() as session:
        row = session.get(Subscription, "dup-1")
        assert row is not None and row.display_name == "first"


@pytest.mark.parametrize("size", [1, 3])
def test_an_answer_that_fails_to_render_does_not_undo_the_writes(tmp_path: Path, size: int) -> None:
    batcher, sessions = _batcher(tmp_path)

    def add(name: str) -> Callable[[Round], Answer]:
        def work(round_: Round) -> Answer:
            round_.session.add(Subscription(id=name, display_name=name))

            def answer(_placed: Any) -> Any:
                raise RuntimeError("render failed")

            return answer

        return work

    names = [f"ren{size}-{i}" for i in range(size)]
    answers = asyncio.run(_in_one_batch(batcher, [add(n) for n in names]))
    assert all(isinstance(a, RuntimeError) for a in answers)
    assert _subscriptions(sessions, f"ren{size}-") == set(names)


# -- run reports over a real cluster's rows -------------------------------------------------------
def _cluster_with_idle_node(sessions: Any, home: Path, installation: str) -> tuple[int, str, str]:
    """A 1-node cluster whose node is idle and registered; (workspace id, node id, node token)."""
    now = datetime.now(UTC)
    with sessions.begin() as session:
        ws = session.scalars(select(Workspace)).one()
        doc = {"type": "amlcompute", "name": "batch", "size": SIZE, "min_instances": 1, "max_instances": 1}
        compute = Compute(
            workspace_id=ws.id,
            name="batch",
            type="amlcompute",
            location=ws.location,
            size=SIZE,
            spec=spec_to_doc(parse_compute(doc)),
            created_by="test",
            provisioning_state="Succeeded",
            current_node_count=1,
            target_node_count=1,
            errors=[],
            warnings=[],
            created_on=now,
            last_modified_on=now,
        )
        session.add(compute)
        session.flush()
        size = catalogue_service.current(session).get(SIZE)
        assert size is not None
        node, token = node_service.new_node(
            session,
            owner=compute,
            installation_id=installation,
            location=ws.location,
            size=size,
            tier="dedicated",
        )
        node.state, node.idle_since = NodeState.IDLE.value, time.time()
        return ws.id, node.id, token


def _cluster_store(tmp_path: Path) -> tuple[DispatchBatcher, Any, DataRoot, tuple[int, str, str]]:
    """A batcher over a fresh store holding a 1-node cluster whose node is idle."""
    batcher, sessions = _batcher(tmp_path)
    with sessions() as session:
        installation = session.scalars(select(Installation.id)).one()
    return (
        batcher,
        sessions,
        DataRoot(tmp_path / "data"),
        _cluster_with_idle_node(sessions, tmp_path, installation),
    )


def _submit_work(workspace_id: int, name: str, data: DataRoot) -> Callable[[Round], Answer]:
    prepared = job_service.prepare({"command": "true", "compute": "azureml:batch"}, name)

    def work(round_: Round) -> Answer:
        workspace = round_.session.get(Workspace, workspace_id)
        assert workspace is not None
        caller = Caller(0, "test", True)
        _job, target = job_service.submit(
            round_.session, workspace, name, prepared, caller, data, round_.memo
        )
        assert target is not None
        round_.fed[target.id] = target
        return lambda _placed: name

    return work


def test_running_and_exit_of_one_run_in_one_batch_settle_it_once(tmp_path: Path) -> None:
    """A run reported running and exited in the same batch: the first report holds the rows as
    objects (changed, not yet flushed) while the exit writes them in plain SQL; those objects are
    flushed first and then take the written values, so nothing is overwritten at flush. The job
    completes, the node is idle again and takes the next job, whose spec rides back in the exit's
    answer."""
    batcher, sessions, data, (ws_id, node_id, token) = _cluster_store(tmp_path)

    paths: list[str] = []

    async def scenario() -> list[Any]:
        batcher.start(asyncio.get_running_loop())
        try:
            await batcher.apply(_submit_work(ws_id, "first", data))  # placed on the idle node
            with sessions() as session:
                run_id = session.scalars(select(JobRun.id)).one()
            started = time.time()
            running = {"pid": 4242, "started_at": started}
            exited = {"exit_code": 0, "ended_at": started + 0.01, "started_at": started}
            works = [
                agent_protocol.running_report(run_id, token, RunningReport(**running)),
                _spied(agent_protocol.exit_report(run_id, token, ExitReport(**exited)), paths),
                _submit_work(ws_id, "second", data),
            ]
            return await _in_one_batch(batcher, works, start=False)
        finally:
            batcher.stop()

    running_answer, exit_answer, _ = asyncio.run(scenario())
    assert running_answer == {"ok": True}
    assert paths == ["freed"]
    with sessions() as session:
        first = session.scalars(select(Job).where(Job.name == "first")).one()
        second = session.scalars(select(Job).where(Job.name == "second")).one()
        first_run = session.scalars(select(JobRun).where(JobRun.job_id == first.id)).one()
        node = session.get(Node, node_id)
        assert node is not None
        assert (first.status, first.exit_code) == ("Completed", 0)
        assert (first_run.state, first_run.exit_code, first_run.pid) == ("exited", 0, 4242)
        assert second.status == "Preparing" and node.state == "busy" and node.current_run == "second"
    assert [spec["job"] for spec in exit_answer["start"]] == ["second"]


def test_an_exit_alone_frees_its_node_for_its_cluster(tmp_path: Path) -> None:
    batcher, sessions, data, (ws_id, node_id, token) = _cluster_store(tmp_path)
    fast_paths: list[str] = []

    async def scenario() -> Any:
        batcher.start(asyncio.get_running_loop())
        try:
            await batcher.apply(_submit_work(ws_id, "failing", data))
            with sessions() as session:
                run_id = session.scalars(select(JobRun.id)).one()
            report = agent_protocol.exit_report(run_id, token, ExitReport(exit_code=3, ended_at=time.time()))
            return await batcher.apply(_spied(report, fast_paths))
        finally:
            batcher.stop()

    answer = asyncio.run(scenario())
    assert answer == {"ok": True, "start": []}
    assert fast_paths == ["freed"]
    with sessions() as session:
        job = session.scalars(select(Job).where(Job.name == "failing")).one()
        node = session.get(Node, node_id)
        assert node is not None and node.state == "idle" and node.current_run is None
        assert job.status == "Failed" and job.exit_code == 3 and job.ended_at is not None
        assert job.error == {
            "code": "UserError",
            "message": "process 0 exited with code 3; see user_logs/std_log.txt",
        }


def test_a_placement_and_an_exit_record_their_events_from_the_rows_they_read(tmp_path: Path) -> None:
    """Plain-SQL moves take their events' sources from the rows the round read (no read of their
    own): each event names the workspace, the compute, where the row came from and the detail."""
    batcher, sessions, data, (ws_id, node_id, token) = _cluster_store(tmp_path)
    with sessions() as session:
        seen = session.scalar(select(func.max(LifecycleEvent.seq))) or 0
        compute_id = session.scalars(select(Compute.id).where(Compute.name == "batch")).one()

    async def scenario() -> None:
        batcher.start(asyncio.get_running_loop())
        try:
            await batcher.apply(_submit_work(ws_id, "evented", data))
            with sessions() as session:
                run_id = session.scalars(select(JobRun.id)).one()
            report = ExitReport(exit_code=3, ended_at=time.time())
            await batcher.apply(agent_protocol.exit_report(run_id, token, report), urgent=True)
        finally:
            batcher.stop()

    asyncio.run(scenario())
    with sessions() as session:
        found = session.scalars(
            select(LifecycleEvent).where(LifecycleEvent.seq > seen).order_by(LifecycleEvent.seq)
        ).all()
        # a job's status message is its own business here: only the error's code is compared
        got = [
            (e.workspace_id, e.type, e.name, e.compute, e.from_state, e.to_state, _coded(e.detail))
            for e in found
        ]
    owner = {"owner": f"computes/{compute_id}"}
    assert got == [
        (ws_id, "job", "evented", "batch", None, "Queued", None),
        (ws_id, "job", "evented", "batch", "Queued", "Preparing", None),
        (ws_id, "node", node_id, "batch", "idle", "busy", owner),
        (ws_id, "node", node_id, "batch", "busy", "idle", owner),
        (ws_id, "job", "evented", "batch", "Preparing", "Failed", {"error": "UserError"}),
    ]


def _coded(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    kept = {key: value for key, value in (detail or {}).items() if key != "message"}
    return kept or None


def test_a_report_with_a_wrong_token_or_an_unknown_run_is_refused_and_changes_nothing(
    tmp_path: Path,
) -> None:
    batcher, sessions, data, (ws_id, node_id, token) = _cluster_store(tmp_path)

    async def scenario() -> list[Any]:
        batcher.start(asyncio.get_running_loop())
        try:
            await batcher.apply(_submit_work(ws_id, "guarded", data))
            with sessions() as session:
                run_id = session.scalars(select(JobRun.id)).one()
            exited = {"exit_code": 0, "ended_at": time.time()}
            reports = [
                agent_protocol.exit_report(run_id, "not-the-node-token", ExitReport(**exited)),
                agent_protocol.running_report(run_id, "not-the-node-token", RunningReport(pid=1)),
                agent_protocol.exit_report("r-000000000000", token, ExitReport(**exited)),
            ]
            return await _in_one_batch(batcher, reports, start=False)
        finally:
            batcher.stop()

    wrong_exit, wrong_running, unknown = asyncio.run(scenario())
    for refused in (wrong_exit, wrong_running):
        assert isinstance(refused, CloudletError) and refused.status == 401, refused
    assert isinstance(unknown, CloudletError) and unknown.status == 404 and unknown.code == "RunNotFound"
    with sessions() as session:
        job = session.scalars(select(Job).where(Job.name == "guarded")).one()
        run = session.scalars(select(JobRun)).one()
        node = session.get(Node, node_id)
        assert node is not None
        assert (job.status, run.state, run.pid, node.state) == ("Preparing", "sent", None, "busy")
