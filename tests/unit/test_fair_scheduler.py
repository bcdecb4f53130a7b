"""The scheduler's round with fair share, team caps and preemption (issue 31), over a real SQLite
store: ``dispatch.schedule_compute`` places, preempts (checkpoint and requeue through the runs'
exits) and orders ``queue_in_order``; without shares it places exactly as before.

The cluster's size has 1 vCPU, so a one-node job holds 1 core and 4 nodes are 4 cores."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.control.clusters import _less_held_back
from cloudlet.domain.compute import autoscale
from cloudlet.domain.compute.nodes import NodeState
from cloudlet.domain.jobs.fair_share import FairShareConfig, TeamShare
from cloudlet.domain.jobs.run_state import PREEMPT_REQUESTED, ExitReason
from cloudlet.domain.jobs.scheduling import QueuedJob, schedule
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import nodes as node_service
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import dispatch, exits, fair_config, fair_queue, fair_usage
from cloudlet.store.schema import Compute, Job, JobRun, LifecycleEvent, Node, Team, TeamMember
from cloudlet.store.schema import TeamShare as TeamShareRow
from tests.unit.control_fakes import SIZE, add_cluster, new_store

URL = "http://127.0.0.1:9"
NODES = 4
HALVES = FairShareConfig(
    (TeamShare("A", 50), TeamShare("B", 50)), {"a": "A", "a2": "A", "b": "B"}, half_life_s=3600.0
)


class Store:
    def __init__(self, sessions: sessionmaker[Session], installation: str, data: DataRoot) -> None:
        self.sessions, self.installation, self.data = sessions, installation, data
        self.clock = 1000.0  # submission times, increasing

    def compute(self, session: Session, name: str = "pool") -> Compute:
        return session.scalars(select(Compute).where(Compute.name == name)).one()

    def submit(
        self,
        name: str,
        user: str = "a",
        nodes: int = 1,
        priority: int = 2,
        tier: str | None = None,
        **extra: Any,
    ) -> None:
        self.clock += 1.0
        with self.sessions.begin() as session:
            compute = self.compute(session)
            session.add(
                Job(
                    workspace_id=compute.workspace_id,
                    name=name,
                    compute_name=compute.name,
                    spec={
                        "command": "true",
                        "compute": "azureml:pool",
                        "resources": {"instance_count": nodes},
                    },
                    kind="command",
                    status="Queued",
                    priority=priority,
                    job_tier=tier,
                    instance_count=nodes,
                    attempt=0,
                    max_attempts=extra.get("max_attempts", 3),
                    created_by=user,
                    submitted_at=self.clock,
                )
            )

    @staticmethod
    def spec(nodes: int) -> dict[str, Any]:
        return {"command": "true", "compute": "azureml:pool", "resources": {"instance_count": nodes}}

    def round(self, full: bool = True) -> list[str]:
        """A scheduling round: the reconciler's pass (FULL), or a submission's or an exit's."""
        with self.sessions.begin() as session:
            wake = dispatch.schedule_compute(session, self.compute(session), self.data, URL, full=full)
            dispatch.deliveries(session)
        return wake

    def placed(self) -> dict[str, tuple[str, ...]]:
        """Job name → its current attempt's nodes (live runs)."""
        with self.sessions() as session:
            rows = session.execute(
                select(Job.name, JobRun.node_id)
                .join(JobRun, (JobRun.job_id == Job.id) & (JobRun.attempt == Job.attempt))
                .where(JobRun.state != "exited")
                .order_by(JobRun.rank)
            ).all()
        out: dict[str, tuple[str, ...]] = {}
        for name, node in rows:
            out[name] = (*out.get(name, ()), node)
        return out

    def started_long_ago(self, seconds: float = 3600.0) -> None:
        """Every live run is running, since SECONDS ago (past any minimum run time)."""
        with self.sessions.begin() as session:
            session.execute(
                update(JobRun)
                .where(JobRun.state != "exited")
                .values(state="running", started_at=time.time() - seconds, assigned_at=time.time() - seconds)
            )
            session.execute(update(Job).where(Job.status == "Preparing").values(status="Running"))

    def agent_stops_all(self, count: int = 2) -> list[str]:
        """COUNT running jobs end on their own (exit 0), as their agents report it."""
        with self.sessions.begin() as session:
            runs = session.execute(
                select(JobRun.id, Job.name)
                .join(Job)
                .where(JobRun.state != "exited")
                .order_by(Job.name)
                .limit(count)
            ).all()
            for run_id, _ in runs:
                exits.record_exit(session, run_id, 0, ExitReason.EXITED, time.time())
        return [name for _, name in runs]

    def job(self, name: str) -> Job:
        with self.sessions() as session:
            return session.scalars(select(Job).where(Job.name == name)).one()

    def agent_stops(self) -> list[str]:
        """What an agent does with runs it is told to stop: SIGTERM, grace, exit reported as
        ``canceled`` (143). The names of the jobs whose runs ended."""
        ended = []
        with self.sessions.begin() as session:
            runs = session.execute(
                select(JobRun.id, Job.name)
                .join(Job)
                .where(JobRun.reason == PREEMPT_REQUESTED, JobRun.state != "exited")
            ).all()
            for run_id, name in runs:
                exits.record_exit(session, run_id, 143, ExitReason.CANCELED, time.time())
                ended.append(name)
        return ended


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    yield from made_store(tmp_path, monkeypatch, None)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Store]:
    """The store over SQLite, and over PostgreSQL: the fair round's window and history queries are
    plain SQL that both must run."""
    db_url = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    yield from made_store(tmp_path, monkeypatch, db_url)


def made_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str | None) -> Iterator[Store]:
    sessions, installation = new_store(tmp_path / "home", db_url)
    add_cluster(sessions, "pool", max_instances=NODES)
    with sessions.begin() as session:
        compute = session.scalars(select(Compute).where(Compute.name == "pool")).one()
        size = catalogue_service.current(session).get(SIZE)
        assert size is not None and size.vcpus == 1
        for _ in range(NODES):
            node, _ = node_service.new_node(
                session,
                owner=compute,
                installation_id=installation,
                location="local",
                size=size,
                tier="dedicated",
                now=time.time(),
            )
            node.state, node.registered_at = NodeState.IDLE.value, time.time()
    fair_queue.forget_configs()
    fair_usage.forget()
    monkeypatch.setenv("CLOUDLET_PREEMPT_MIN_RUN_S", "600")
    yield Store(sessions, installation, DataRoot(tmp_path / "data"))
    fair_queue.forget_configs()
    fair_usage.forget()


def with_shares(monkeypatch: pytest.MonkeyPatch, config: FairShareConfig = HALVES) -> None:
    monkeypatch.setattr(fair_config, "for_compute", lambda session, compute, users=None: config)
    fair_queue.forget_configs()


def node_ids(store: Store) -> list[str]:
    with store.sessions() as session:
        return list(session.scalars(select(Node.id).order_by(Node.created_at)))


def test_without_shares_and_equal_priorities_placements_are_todays(store: Store) -> None:
    sizes = [2, 3, 1, 1, 2, 1]
    for i, nodes in enumerate(sizes):
        store.submit(f"j{i}", user="ab"[i % 2], nodes=nodes)
    idle = node_ids(store)
    views = [QueuedJob(f"j{i}", n, 2, 1001.0 + i) for i, n in enumerate(sizes)]
    expected = {p.job: p.nodes for p in schedule(views, idle)}
    store.round()
    assert store.placed() == expected  # j0 on 2 nodes, j2 and j3 backfill; j1 (3 nodes) waits
    assert expected == {"j0": tuple(idle[:2]), "j2": (idle[2],), "j3": (idle[3],)}


def test_spot_jobs_go_after_every_other_job(store: Store) -> None:
    store.submit("spot-1", tier="spot", priority=3)
    for i in range(4):
        store.submit(f"low-{i}", priority=1)
    with store.sessions() as session:
        order = [r.name for r in dispatch.queue_in_order(session, 1, "pool", 10)]
    assert order == ["low-0", "low-1", "low-2", "low-3", "spot-1"]
    store.round()
    assert set(store.placed()) == {"low-0", "low-1", "low-2", "low-3"}


def test_the_fair_order_puts_the_team_that_used_less_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_shares(monkeypatch)
    for i in range(4):
        store.submit(f"a-{i}")
    store.round()
    store.started_long_ago()
    for i in range(3):
        store.submit(f"a-more-{i}")
    store.submit("b-0", user="b")
    with store.sessions() as session:
        order = [r.name for r in dispatch.queue_in_order(session, 1, "pool", 10)]
    assert order == ["b-0", "a-more-0", "a-more-1", "a-more-2"]  # B used nothing lately


def test_a_team_below_its_share_preempts_borrowed_jobs_which_requeue_without_using_an_attempt(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = any_store
    with_shares(monkeypatch)
    for i in range(4):
        store.submit(f"a-{i}", max_attempts=1)
    store.round()
    assert set(store.placed()) == {"a-0", "a-1", "a-2", "a-3"}
    store.started_long_ago()
    store.submit("b-0", user="b")
    store.submit("b-1", user="b")
    wake = store.round()
    with store.sessions() as session:
        stopping = session.execute(
            select(Job.name, Job.preemptions, Job.status_message, JobRun.node_id)
            .join(JobRun, JobRun.job_id == Job.id)
            .where(JobRun.reason == PREEMPT_REQUESTED)
        ).all()
        events = (
            session.execute(select(LifecycleEvent).where(LifecycleEvent.to_state == "Preempted"))
            .scalars()
            .all()
        )
        figure = fair_queue.preemption_figure(session, store.compute(session))
    assert len(stopping) == 2, stopping  # A's two borrowed jobs: B's half
    assert {row.node_id for row in stopping} <= set(wake)  # their agents are woken to stop them
    for row in stopping:
        assert row.preemptions == 1
        assert row.status_message.startswith("preempted to give team B its share: B holds 0 of 2 cores")
    assert sorted(e.name for e in events) == sorted(row.name for row in stopping)
    assert figure == "preemptions in the last hour: 2 of 60"

    # A round while they stop preempts nobody else: their cores are already B's.
    store.round()
    with store.sessions() as session:
        assert session.scalar(
            select(Job.preemptions).where(Job.name.like("a-%")).order_by(Job.preemptions.desc())
        )
        assert len(session.execute(select(JobRun.id).where(JobRun.reason == PREEMPT_REQUESTED)).all()) == 2

    # The agents stop them: requeued (max_attempts 1 not used up), and B takes the nodes.
    ended = store.agent_stops()
    for name in ended:
        job = store.job(name)
        assert job.status == "Queued", (job.status, job.error)
        assert job.status_message is not None and "its share" in job.status_message
    store.round()
    placed = store.placed()
    assert {"b-0", "b-1"} <= set(placed), placed
    assert not set(ended) & set(placed)


def test_a_submissions_round_on_a_full_pool_leaves_preemption_to_the_pass(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_shares(monkeypatch)
    for i in range(4):
        store.submit(f"a-{i}")
    store.round()
    store.started_long_ago()
    store.submit("b-0", user="b")
    assert store.round(full=False) == []  # no idle node: nothing decided, nothing read of the queue

    def stopping() -> int:
        with store.sessions() as session:
            return len(session.execute(select(JobRun.id).where(JobRun.reason == PREEMPT_REQUESTED)).all())

    assert stopping() == 0
    store.round()  # the reconciler's pass
    assert stopping() == 1


def test_the_guard_keeps_young_jobs_and_bounds_the_hour(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_shares(monkeypatch)
    for i in range(4):
        store.submit(f"a-{i}")
    store.round()
    store.started_long_ago(seconds=60)  # younger than the minimum run time (600 s)
    store.submit("b-0", user="b")
    store.submit("b-1", user="b")
    store.round()
    assert store.agent_stops() == []
    monkeypatch.setenv("CLOUDLET_PREEMPT_MAX_PER_HOUR", "1")
    store.started_long_ago(seconds=3600)
    store.round()
    assert len(store.agent_stops()) == 1  # the hour's cap: one
    store.round()
    assert store.agent_stops() == []
    with store.sessions() as session:
        assert (
            fair_queue.preemption_figure(session, store.compute(session))
            == "preemptions in the last hour: 1 of 1"
        )


def test_a_team_at_its_cap_waits_and_asks_no_node(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    capped = FairShareConfig((TeamShare("A", 50, borrow_limit=0), TeamShare("B", 50)), {"a": "A", "b": "B"})
    with_shares(monkeypatch, capped)
    for i in range(4):
        store.submit(f"a-{i}")
    with store.sessions.begin() as session:
        dispatch.schedule_compute(session, store.compute(session), store.data, URL)
        held = dispatch.held_back_nodes(session, store.compute(session).id)
    assert set(store.placed()) == {"a-0", "a-1"}  # A's share: 2 of 4 cores, no borrowing
    assert held == 2


def test_priority_orders_the_queue_without_shares(store: Store) -> None:
    for i in range(5):
        store.submit(f"low-{i}", priority=1)
    store.submit("high", priority=3)
    store.round()
    assert set(store.placed()) == {"high", "low-0", "low-1", "low-2"}


def test_usage_kept_per_process_is_the_historys_figure(
    any_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rounds keep a copy of the finished attempts' usage and add those that end meanwhile; at
    every round it equals the figure derived from the whole history (what another process, or
    one just started, computes), so no worker's order drifts from another's."""
    store = any_store
    with_shares(monkeypatch)
    for i in range(4):
        store.submit(f"a-{i}", user="a" if i % 2 else "b")
    store.round()
    store.started_long_ago(seconds=100)

    def figures() -> tuple[dict[str, float], dict[str, float]]:
        with store.sessions() as session:
            compute = store.compute(session)
            fair_queue.decide_round(session, compute, HALVES)  # a round: the copy is kept
            now, ws = time.time(), compute.workspace_id
            kept = fair_usage.usage(session, compute.id, ws, "pool", 1, _live(session), HALVES, now)
            full = fair_usage.from_history(session, ws, "pool", 1, now, HALVES.half_life_s)
        return ({u: v for (_, u), v in kept.users.items()}, {u: v for (_, u), v in full.users.items()})

    kept, full = figures()
    assert kept.keys() == full.keys() == {"a", "b"}
    assert all(abs(kept[u] - full[u]) < 0.5 for u in full), (kept, full)  # ~200 core-s each
    ended = store.agent_stops_all()  # two of them end between rounds
    assert len(ended) == 2
    kept, full = figures()
    assert all(abs(kept[u] - full[u]) < 0.5 for u in full), (kept, full)
    fair_usage.forget()  # a fresh process: its first round reads the history
    again, _ = figures()
    assert all(abs(again[u] - kept[u]) < 0.5 for u in kept), (again, kept)


def _live(session: Session) -> list[fair_usage.Live]:
    rows = session.execute(
        select(Job.created_by, func.min(JobRun.started_at))
        .join(JobRun, (JobRun.job_id == Job.id) & (JobRun.attempt == Job.attempt))
        .where(JobRun.state != "exited")
        .group_by(Job.id, Job.created_by)
    ).all()
    return [fair_usage.Live(user, 1.0, float(start)) for user, start in rows]


def test_a_high_priority_job_preempts_only_as_the_domain_rule_says(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_shares(monkeypatch)
    for i in range(2):
        store.submit(f"a-low-{i}", priority=1)
        store.submit(f"b-low-{i}", user="b", priority=1)
    store.round()
    store.started_long_ago()
    store.submit("b-high", user="b", priority=3)
    store.round()
    with store.sessions() as session:
        stopping = session.execute(
            select(Job.name, Job.status_message)
            .join(JobRun, JobRun.job_id == Job.id)
            .where(JobRun.reason == PREEMPT_REQUESTED)
        ).all()
    # Each team holds its own share: B's high job takes one of B's own low jobs, never A's.
    assert len(stopping) == 1 and stopping[0].name.startswith("b-low-"), stopping
    assert stopping[0].status_message.startswith("preempted for b-high, priority 3 over 1"), stopping


def test_shares_from_the_store_with_a_user_in_no_team(store: Store) -> None:
    """The real ``fair_config`` over the teams' rows: a user in no team is in the default team,
    listed (with the mean share) only while they have jobs here; the round reads it again then."""
    with store.sessions.begin() as session:
        compute = store.compute(session)
        for name, user in (("A", "a"), ("B", "b")):
            made = Team(name=name, created_at=time.time())
            session.add(made)
            session.flush()
            session.add(TeamMember(principal_name=user, team_id=made.id))
            session.add(
                TeamShareRow(
                    team_id=made.id,
                    pool_kind="compute",
                    workspace_id=compute.workspace_id,
                    pool_name=compute.name,
                    share=50.0,
                )
            )
    fair_queue.forget_configs()
    for i in range(4):
        store.submit(f"a-{i}")
    store.submit("c-0", user="c")
    store.round()
    assert set(store.placed()) == {"a-0", "a-1", "a-2", "a-3"}
    store.started_long_ago()
    store.submit("b-0", user="b")
    with store.sessions() as session:
        compute = store.compute(session)
        config = fair_queue.config_for(session, compute)
        assert config is not None and config.team_of("c") == "default"
        decided = fair_queue.decide_round(session, compute, config)
    # Three teams now (A, B and the default team of c), a third each of 4 cores: b and c are
    # below their share, A borrows; both claims are served by A's borrowed jobs (guarded: 1 h run).
    assert sorted(r.name for r in decided.ordered) == ["b-0", "c-0"]
    assert sorted(v.preemption.for_job for v in decided.victims) == ["b-0", "c-0"]


def test_positions_are_exact_deeper_than_the_rounds_window(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_shares(monkeypatch)
    for i in range(4):
        store.submit(f"a-{i}")
    store.round()
    store.started_long_ago()
    monkeypatch.setattr(fair_queue, "USER_WINDOW", 2)  # the round reads each user's first 2
    for i in range(3):
        store.submit(f"a-more-{i}")
    for i in range(3):
        store.submit(f"b-{i}", user="b")
    with store.sessions() as session:
        order = [r.name for r in dispatch.queue_in_order(session, 1, "pool", 10)]
    assert order == ["b-0", "b-1", "b-2", "a-more-0", "a-more-1", "a-more-2"]


def test_the_autoscaler_is_not_asked_for_nodes_a_cap_holds_back() -> None:
    demand = autoscale.Demand(running_nodes=2, queued=(5,))
    assert _less_held_back(demand, 0) == demand
    assert _less_held_back(demand, 2) == autoscale.Demand(2, (3,))
    assert _less_held_back(demand, 9) == autoscale.Demand(2, ())
