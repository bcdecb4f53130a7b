"""One decision pass: order, victims and starts put together as the server and the simulator call them."""

from __future__ import annotations

from cloudlet.domain.jobs import fair_share as fs
from cloudlet.domain.jobs.fair_pass import PassPolicy, RunningJob, decide
from cloudlet.domain.jobs.preemption import Guard, PreemptReason

CONFIG = fs.FairShareConfig((fs.TeamShare("a", 1.0), fs.TeamShare("b", 1.0)), half_life_s=3600.0)
NOW = 10_000.0


def queued(name: str, team: str, t: float = 0.0, cores: int = 1) -> fs.FairJob:
    return fs.FairJob(name, team, team, cores, 2, t)


def running(name: str, team: str, started: float, ckpt: float | None = None) -> RunningJob:
    return RunningJob(name, team, 1, 2, False, started, ckpt)


A_FILLS = [running(f"a{i}", "a", float(i)) for i in range(4)]


def test_team_below_share_reclaims_and_starts_in_the_same_pass() -> None:
    got = decide(CONFIG, PassPolicy(), 4, [queued("b1", "b")], A_FILLS, fs.Usage(NOW), NOW)
    assert [(p.victim, p.reason) for p in got.preempt] == [("a3", PreemptReason.RECLAIM)]
    assert [j.name for j in got.start] == ["b1"]


def test_guard_holds_the_victims_back() -> None:
    young = [running(f"a{i}", "a", NOW - 60) for i in range(4)]
    policy = PassPolicy(guard=Guard(min_run_s=600))
    got = decide(CONFIG, policy, 4, [queued("b1", "b")], young, fs.Usage(NOW), NOW)
    assert got.preempt == [] and got.start == []


def test_without_borrowing_a_team_stops_at_its_share() -> None:
    policy = PassPolicy(borrow=False, preempt=False)
    jobs = [queued("a9", "a", 0.0), queued("b1", "b", 1.0)]
    got = decide(CONFIG, policy, 4, jobs, A_FILLS[:2], fs.Usage(NOW), NOW)
    assert [j.name for j in got.start] == ["b1"] and got.preempt == []


def test_order_follows_usage_or_fifo() -> None:
    jobs = [queued("a-old", "a", 0.0), queued("b-new", "b", 5.0)]
    usage = fs.Usage(NOW, {("a", "a"): 1000.0})
    fair = decide(CONFIG, PassPolicy(preempt=False), 4, jobs, [], usage, NOW)
    assert [j.name for j in fair.order] == ["b-new", "a-old"]
    fifo = decide(CONFIG, PassPolicy(fair=False, preempt=False), 4, jobs, [], usage, NOW)
    assert [j.name for j in fifo.order] == ["a-old", "b-new"] and len(fifo.start) == 2
