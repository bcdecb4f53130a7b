"""Every queued job's place and estimated start from one pass (domain.jobs.queue_places)."""

from __future__ import annotations

import math
import random

import pytest

from cloudlet.domain.jobs.job_wait import WaitCode, WaitReason
from cloudlet.domain.jobs.queue_places import (
    Pace,
    Place,
    Queued,
    Standing,
    boot_estimate,
    in_words,
    places,
    position_text,
    queue_reason,
    replay_starts,
)
from cloudlet.domain.jobs.wait_estimate import (
    Ahead,
    RunningEnd,
    TeamStanding,
    estimate_start,
    paced_start,
    stretched,
)


def _job(i: int, units: int = 1, duration: float = 60.0, **kw: object) -> Queued:
    fields: dict[str, object] = {
        "team": None,
        "priority": 2,
        "spot": False,
        "nodes": units,
        "cores": units * 4,
        "canceled": False,
    }
    fields.update(kw)
    return Queued(i, units=units, duration_s=duration, **fields)  # type: ignore[arg-type]


def test_one_replay_gives_what_estimate_start_gives_for_each_job() -> None:
    rng = random.Random(7)
    running = [RunningEnd(rng.randint(1, 3), rng.uniform(0, 600)) for _ in range(5)]
    queue = [_job(i, rng.randint(1, 4), rng.uniform(10, 900)) for i in range(60)]
    starts, _ = replay_starts(8, 0, running, queue)
    for i, job in enumerate(queue):
        ahead = [Ahead(j.units, j.duration_s) for j in queue[:i]]
        assert starts[i] == pytest.approx(estimate_start(job.units, 8, 0, running, ahead)), i


def test_canceled_and_oversized_jobs_hold_no_one_back() -> None:
    queue = [_job(1, 9), _job(2, 2, canceled=True), _job(3, 2)]
    starts, _ = replay_starts(4, 2, [RunningEnd(2, 30.0)], queue)
    assert starts == [None, None, 0.0]
    found = places(queue, 4, 2, [RunningEnd(2, 30.0)])
    assert found[1] is None
    third = found[2]
    assert third is not None and third.position == 2 and third.ahead == 1  # the canceled one is skipped


def test_a_job_that_needs_a_node_not_up_yet_starts_once_it_has_booted() -> None:
    # 1 node idle, 1 starting (up in 20 s), 1 to be made (up in 45 s); one running job ends at 100 s.
    arrivals = [(20.0, 1), (45.0, 1)]
    queue = [_job(1, 1, 300.0), _job(2, 1, 300.0), _job(3, 1, 300.0), _job(4, 2, 300.0)]
    starts, booted = replay_starts(4, 1, [RunningEnd(1, 100.0)], queue, arrivals)
    assert starts == [0.0, 20.0, 45.0, 300.0] and booted == [False, True, True, False]
    # A node that comes up before the running job frees the other adds nothing: not its boot.
    starts, booted = replay_starts(2, 0, [RunningEnd(1, 100.0)], [_job(1, 2, 60.0)], [(30.0, 1)])
    assert starts == [100.0] and booted == [False]
    found = places([_job(1, 1)], 1, 0, [], arrivals=[(30.0, 1)])
    assert found[0] is not None and found[0].start_in_s == 30.0 and found[0].waits_for_boot


def test_boot_time_comes_from_the_computes_node_starts_else_the_providers_default() -> None:
    learned = boot_estimate([40.0, 10.0, 30.0], "kube")
    assert learned.seconds == 30.0 and learned.basis == "the median of this compute's last 3 node starts"
    assert boot_estimate([10.0, 20.0], "local").seconds == 15.0
    assert boot_estimate([], "local").seconds == 5.0 and "local provider" in boot_estimate([], "local").basis
    assert boot_estimate([], "someone-elses").seconds == 180.0


def test_places_count_what_is_ahead_in_one_pass() -> None:
    queue = [
        _job(1, priority=3, team="a"),
        _job(2, 2, team="a"),
        _job(3, team="b"),
        _job(4, team="a", spot=True),
        _job(5, priority=1, team="b"),
    ]
    found = places(queue, 4, 0, [RunningEnd(4, 120.0)])
    third, fourth, fifth = found[2], found[3], found[4]
    assert third is not None and fourth is not None and fifth is not None
    assert (third.position, third.ahead, third.ahead_cores, third.ahead_nodes) == (3, 2, 12, 3)
    assert third.ahead_higher_priority == 1 and third.ahead_other_teams == 1  # job 2: team a, same band
    assert fourth.ahead_not_spot == 3 and fourth.ahead_other_teams == 0  # the only spot job
    assert fifth.ahead_higher_priority == 4 and fifth.ahead_other_teams == 0  # alone in its band
    # The first three take the 4 nodes freed at 120 s; the fourth waits for them to end (60 s each).
    assert [p.start_in_s if p else None for p in found[:4]] == [120.0, 120.0, 120.0, 180.0]


def test_a_deep_queue_is_one_pass() -> None:
    queue = [_job(i, 1, 30.0) for i in range(10_000)]
    found = places(queue, 100, 0, [RunningEnd(1, 10.0) for _ in range(100)])
    last = found[-1]
    assert last is not None and last.position == 10_000
    assert last.start_in_s == pytest.approx(10.0 + 30.0 * 99)


def _standing(at_cap: bool = False) -> Standing:
    return Standing(TeamStanding("B", 8, 8, 0.71, 0.5, 2 ** (-0.71 / 0.5)), at_cap)


def test_the_reason_ahead_replaces_a_bare_capacity_reason() -> None:
    full = WaitReason(WaitCode.CLUSTER_AT_MAX, "the cluster is at its maximum of 2 nodes, all busy")
    place = Place(4, 3, 12, 3, 0, 2, 3, 60.0)
    fair = queue_reason(full, place, False, _standing())
    assert fair.code is WaitCode.FAIR_SHARE
    assert "team B has used 71% of the pool lately against a share of 50%" in fair.message, fair
    assert queue_reason(full, place, True, _standing()).code is WaitCode.SPOT
    higher = queue_reason(full, Place(4, 3, 12, 3, 1, 2, 3, 60.0), False, _standing())
    assert higher.code is WaitCode.BEHIND_HIGHER_PRIORITY and "1 job of higher priority" in higher.message
    assert queue_reason(full, Place(4, 3, 12, 3, 0, 0, 3, 60.0), False, _standing()) == full
    capped = queue_reason(full, Place(1, 0, 0, 0, 0, 0, 0, 60.0), False, _standing(at_cap=True))
    assert capped.code is WaitCode.FAIR_SHARE and "may not borrow" in capped.message
    locked = WaitReason(WaitCode.LOCKED, "the cluster cannot add nodes: lock freeze")
    assert queue_reason(locked, place, True, _standing()) == locked  # what stops the compute comes first


def test_words() -> None:
    assert in_words(20) == "in < 1 min"
    assert in_words(61) == "in ~2 min"
    assert in_words(3600) == "in ~1 h"
    assert in_words(2 * 3600 + 300) == "in ~2 h 5 min"
    assert position_text(3, None) == "3" and position_text(12_345, None) == "12,345"
    assert position_text(None, 10_000) == "10,000+" and position_text(None, None) is None
    assert math.isclose(2 ** (-0.71 / 0.5), _standing().team.factor)


def test_a_pipeline_step_not_started_waits_for_its_upstream_steps() -> None:
    from cloudlet.domain.jobs.pipeline_dag import DagStep
    from cloudlet.domain.jobs.queue_places import steps_waiting

    steps = [
        DagStep("prep", "Completed", (), "cpu", "j1", None),
        DagStep("train", "Running", ("prep",), "cpu", "j2", None),
        DagStep("eval", "NotStarted", ("prep", "train"), "cpu", None, None),
        DagStep("skip", "Skipped", ("train",), "cpu", None, None),
    ]
    waits = steps_waiting(steps)
    assert list(waits) == ["eval"]
    assert (
        waits["eval"].code is WaitCode.DEPENDENCY and waits["eval"].message == "waits for train to complete"
    )


def test_with_factors_only_teams_fair_share_puts_first_count_as_ahead_by_it() -> None:
    queue = [_job(1, team="heavy"), _job(2, team="light"), _job(3, team="heavy"), _job(4, team="light")]
    found = places(queue, 4, 0, [], {"heavy": 0.2, "light": 0.9})
    last_heavy, last_light = found[2], found[3]
    assert last_heavy is not None and last_light is not None
    assert last_heavy.ahead_other_teams == 1  # the light job ahead: fair share's pick
    assert last_light.ahead_other_teams == 0  # heavy jobs ahead are there by FIFO, not fair share
    plain = places(queue, 4, 0, [])[3]
    assert plain is not None and plain.ahead_other_teams == 2


def test_the_recent_pace_blends_into_each_start_as_paced_start_does() -> None:
    # 4 nodes, all held by one job expected to run 1 h more; 6 queued jobs of a, b, a, a, b, a
    teams = ["a", "b", "a", "a", "b", "a"]
    queue = [_job(i, 1, 3600.0, team=team) for i, team in enumerate(teams)]
    running = [RunningEnd(4, 3600.0)]
    # the pool started a job every 100 s until now (1000 s), 20 before that long ago; teams alike
    pool = [-1e6] * 20 + [float(t) for t in range(0, 1000, 100)]
    pace = Pace(1000.0, pool, {"a": [-1e6] * 20 + pool[20::2], "b": [-1e6] * 20 + pool[21::2]})
    replayed = [p.start_in_s if p else None for p in places(queue, 4, 0, running, None)]
    paced = [p.start_in_s if p else None for p in places(queue, 4, 0, running, None, pace=pace)]
    assert replayed == [3600.0] * 4 + [7200.0] * 2
    # the first two are at the head (at most 2 of the 4 nodes short): the pool's last 1 and 2 starts
    assert paced[:2] == [100.0, 200.0]
    # deeper: the geometric mean of the replay and the team's pace (its jobs ahead + 1 starts)
    assert paced[2] == pytest.approx(paced_start(3600.0, 3, 4, 300.0, 400.0))  # a: 1 ahead → 2 starts
    assert paced[2] == pytest.approx((3600.0 * 400.0) ** 0.5)
    assert paced[4] == pytest.approx((7200.0 * 300.0) ** 0.5)  # b: 1 ahead → its last 2 starts, since 700
    assert paced[5] == pytest.approx((7200.0 * 800.0) ** 0.5)  # a: 3 ahead → a's last 4 starts
    # without teams the job's class is the pool; with too little history the replay stands
    plain = [_job(i, 1, 3600.0) for i in range(6)]
    found = places(plain, 4, 0, running, None, pace=Pace(1000.0, pool, {}))
    assert found[5] is not None and found[5].start_in_s == pytest.approx((7200.0 * 600.0) ** 0.5)
    short = places(plain, 4, 0, running, None, pace=Pace(1000.0, pool[20:], {}))
    assert [p.start_in_s if p else None for p in short] == replayed  # 10 starts known: no pace


def test_later_arrivals_of_teams_that_go_first_stretch_each_start_before_the_pace() -> None:
    # 4 nodes held for an hour; a, b, a queued. Team b's recent submissions ask for half the pool
    # and b's factor is higher: a's jobs are passed by b's later jobs, b's are not.
    queue = [_job(1, 1, 3600.0, team="a"), _job(2, 1, 3600.0, team="b"), _job(3, 1, 3600.0, team="a")]
    running = [RunningEnd(4, 3600.0)]
    factors = {"a": 0.2, "b": 0.8}
    loads = {("b", 2): 0.5, ("a", 2): 0.25}
    plain = [p.start_in_s if p else None for p in places(queue, 4, 0, running, factors)]
    found = [p.start_in_s if p else None for p in places(queue, 4, 0, running, factors, loads=loads)]
    assert plain == [3600.0] * 3
    assert found == [7200.0, 3600.0, 7200.0]  # a: b's half passes it; b: a's quarter does not
    assert found == [stretched(3600.0, j.team, 2, loads, factors) for j in queue]
    # with the pace, the stretched replay is what is blended: the last a starts at 7200 s behind a
    # 4-node b job, stretched to 14,400; a's pace for its 2 starts is 200 s
    pool = [-1e6] * 20 + [float(t) for t in range(0, 1000, 100)]
    pace = Pace(1000.0, pool, {"a": pool, "b": pool})
    deep = places([_job(0, 4, 3600.0, team="b"), *queue], 4, 0, running, factors, pace=pace, loads=loads)
    last = deep[3]
    assert last is not None and last.start_in_s == pytest.approx(paced_start(7200.0 * 2, 7, 4, None, 200.0))
    # a start that waits for a node's boot is the boot's, not stretched
    booting = places(queue[:1], 1, 0, [], factors, arrivals=[(180.0, 1)], loads=loads)[0]
    assert booting is not None and booting.waits_for_boot and booting.start_in_s == 180.0
