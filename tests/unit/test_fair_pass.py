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


def test_only_possible_victims_get_a_view_and_the_choice_is_unchanged() -> None:
    """decide builds views only for jobs a claim could stop; choose_victims over every running job
    picks the same victims."""
    import random

    from cloudlet.domain.jobs.preemption import Claim, Running, choose_victims

    rng = random.Random(5)
    config = fs.FairShareConfig(tuple(fs.TeamShare(t, 1.0) for t in "abcd"), half_life_s=3600.0)
    guard = Guard(min_run_s=300.0, max_per_hour=20, max_per_job=2)
    chosen = 0
    for _ in range(20):
        run = [
            RunningJob(
                f"r{i}",
                rng.choice("aaab"),  # a and b hold everything: c and d reclaim
                rng.choice((1, 2)),
                rng.choice((1, 2, 3)),
                rng.random() < 0.1,
                NOW - rng.uniform(0, 3000),
                None,
                rng.choice((0, 1, 2)),
            )
            for i in range(40)
        ]
        queue = [
            fs.FairJob(f"q{i}", t, t, rng.choice((1, 2)), rng.choice((1, 2, 3)), float(i), rng.random() < 0.1)
            for i, t in enumerate(rng.choices("abcd", k=30))
        ]
        capacity = sum(j.cores for j in run)  # a full pool
        got = decide(config, PassPolicy(guard=guard), capacity, queue, run, fs.Usage(NOW), NOW)
        entitled = fs.entitlements(config, capacity)
        lent = fs.borrowed(run, entitled)
        held: dict[str, float] = {}
        for j in run:
            held[j.team] = held.get(j.team, 0.0) + j.cores
        views = [
            Running(
                j.name, j.team, j.priority, j.spot, j.started_at, None, j.name in lent, j.cores, j.preemptions
            )
            for j in run
        ]
        claims = [
            Claim(j.name, j.team, j.priority, j.spot, j.cores, held.get(j.team, 0.0), entitled[j.team])
            for j in got.order
        ]
        over = {t: held.get(t, 0.0) - e for t, e in entitled.items()}
        want = choose_victims(claims, views, 0.0, NOW, guard, (), over)
        assert got.preempt == want
        chosen += len(want)
    assert chosen > 0  # the passes did preempt
