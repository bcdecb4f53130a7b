"""Wait estimates and the new reason codes."""

from __future__ import annotations

import pytest

from cloudlet.domain.jobs.job_wait import WaitCode
from cloudlet.domain.jobs.wait_estimate import (
    HEAD_FRACTION,
    MIN_PACE_STARTS,
    UNKNOWN_DURATION_S,
    Ahead,
    RunningEnd,
    TeamStanding,
    arrival_load,
    dependency_reason,
    estimate_start,
    expected_remaining,
    fair_share_reason,
    load_ahead,
    paced_start,
    recent_pace,
    spot_reason,
    stretched,
)


def test_expected_remaining_from_history_timeout_and_fallbacks() -> None:
    history = [10.0, 100.0, 200.0, 400.0]
    assert expected_remaining(0.0, history) == 177.5  # mean of all: a queue drains at the mean
    assert expected_remaining(0.0, history, statistic="median") == 150.0
    assert expected_remaining(150.0, history) == 150.0  # mean of 200, 400 less 150
    assert expected_remaining(150.0, [10.0, 100.0, 200.0, 400.0, 900.0]) == 350.0
    assert expected_remaining(150.0, [10.0, 100.0, 200.0, 400.0, 900.0], statistic="median") == 250.0
    assert expected_remaining(500.0, history) == 500.0  # ran past all: as long again
    assert expected_remaining(0.0, history, timeout_s=120.0) == 120.0
    assert expected_remaining(100.0, [], timeout_s=130.0) == 30.0
    assert expected_remaining(0.0, []) == UNKNOWN_DURATION_S
    assert expected_remaining(10.0, []) == 60.0


def test_estimate_start_replays_the_queue_in_order() -> None:
    running = [RunningEnd(2, 100.0), RunningEnd(2, 300.0)]
    assert estimate_start(1, 4, 1, running, []) == 0.0
    assert estimate_start(2, 4, 0, running, []) == 100.0
    # one job ahead takes the first two freed cores for 500 s; we need 2 more: at 300
    assert estimate_start(2, 4, 0, running, [Ahead(2, 500.0)]) == 300.0
    # ahead needs all 4: starts at 300, runs 50; then us
    assert estimate_start(1, 4, 0, running, [Ahead(4, 50.0)]) == 350.0
    assert estimate_start(8, 4, 4, [], []) is None
    # a job ahead that can never start does not hold us back
    assert estimate_start(1, 4, 1, [], [Ahead(9, 10.0)]) == 0.0


def test_later_arrivals_that_go_ahead_stretch_the_wait() -> None:
    running = [RunningEnd(2, 100.0), RunningEnd(2, 300.0)]
    assert estimate_start(2, 4, 0, running, [], ahead_load=0.5) == 200.0  # half the pool goes to them
    assert estimate_start(2, 4, 0, running, [], ahead_load=5.0) == pytest.approx(1000.0)  # capped at 0.9
    assert estimate_start(1, 4, 1, running, [], ahead_load=0.5) == 0.0  # starts now: nothing to stretch
    # 2 cores for an hour within the last 2 h on a 4-core pool: a quarter of the pool
    arrivals = [(50.0, ("a", 2), 2 * 3600.0), (7200.0, ("b", 3), 3600.0), (-1.0, ("a", 2), 1e9)]
    loads = arrival_load(arrivals, 7200.0, 7200.0, 4)
    assert loads == {("a", 2): 0.25, ("b", 3): 0.125}
    factors = {"a": 0.6, "b": 0.4, "c": 0.2}
    assert load_ahead("c", 2, loads, factors) == 0.375  # a: higher factor; b: higher priority
    assert load_ahead("a", 2, loads, factors) == 0.125  # its own team's later jobs go behind it
    assert load_ahead("c", 2, loads, {}) == 0.125  # no fair share: only higher priorities
    assert load_ahead("b", 3, loads, factors) == 0.0


def test_stretched_is_the_replay_over_what_later_arrivals_leave() -> None:
    loads = {("a", 2): 0.25, ("b", 3): 0.125, ("c", 2): 0.5}
    factors = {"a": 0.6, "b": 0.4, "c": 0.2}
    # c's job: a (higher factor, 0.25) and b (higher priority, 0.125) go ahead; its own team's not
    assert stretched(1000.0, "c", 2, loads, factors) == pytest.approx(1000.0 / (1 - 0.375))
    assert stretched(1000.0, "a", 2, loads, factors) == pytest.approx(1000.0 / (1 - 0.125))
    assert stretched(1000.0, "c", 2, loads, None) == pytest.approx(1000.0 / (1 - 0.125))  # no fair share
    assert stretched(1000.0, None, 2, {("", 2): 0.5}, None) == 1000.0  # one queue: FIFO within a priority
    assert stretched(1000.0, "a", 2, loads, factors, spot=True) == pytest.approx(1000.0 / (1 - 0.875))
    assert stretched(1000.0, "c", 1, loads, factors) == pytest.approx(8000.0)  # every priority-2 job passes
    assert stretched(1000.0, "c", 2, {("a", 2): 5.0}, factors) == pytest.approx(10_000.0)  # capped at 0.9
    assert stretched(0.0, "c", 2, loads, factors) == 0.0  # starts now: nothing to stretch
    assert stretched(1000.0, "c", 2, {}, factors) == 1000.0
    # estimate_start's ahead_load is the same rule
    running = [RunningEnd(4, 1000.0)]
    load = load_ahead("c", 2, loads, factors)
    assert estimate_start(1, 4, 0, running, [], load) == pytest.approx(
        stretched(1000.0, "c", 2, loads, factors)
    )


def test_recent_pace_is_how_long_the_last_starts_took() -> None:
    starts = [100.0, 400.0, 700.0, 900.0, 1000.0]
    assert recent_pace(starts, 1000.0, 1, least=1) == 100.0  # a start at now is not yet known: the 4th
    assert recent_pace(starts, 1000.0, 3, least=1) == 600.0  # the last 3 before now: since 400
    assert recent_pace(starts, 1000.0, 4, least=1) == 900.0
    assert recent_pace(starts, 1000.0, 5, least=1) is None  # 4 known: too little history to say
    assert recent_pace(starts, 1500.0, 5, least=1) == 1400.0
    assert recent_pace(starts, 1000.0, 0) == 0.0
    assert recent_pace([], 1000.0, 1) is None
    # a handful of starts (a new pool or team) says nothing of a pace
    assert recent_pace(starts, 1500.0, 1) is None and len(starts) < MIN_PACE_STARTS
    many = [float(t) for t in range(MIN_PACE_STARTS)]
    assert recent_pace(many, MIN_PACE_STARTS, 2) == 2.0


def test_paced_start_at_the_head_takes_the_pools_pace() -> None:
    # 1 GPU short of 400: the replay's expected ends say 2 h, the pool started its last 3 jobs in 5 min
    assert paced_start(7200.0, 1, 400, 300.0, 9000.0) == 300.0
    assert paced_start(7200.0, HEAD_FRACTION * 400, 400, 300.0, 9000.0) == 300.0
    # no pool history: deeper's rule
    assert paced_start(7200.0, 1, 400, None, 1800.0) == pytest.approx(3600.0)
    # it starts now, or never: the replay's answer stands
    assert paced_start(0.0, 0, 400, 300.0, 300.0) == 0.0
    assert paced_start(None, 1, 400, 300.0, 300.0) is None


def test_paced_start_deeper_is_the_geometric_mean_of_replay_and_the_class_pace() -> None:
    short = HEAD_FRACTION * 400 + 1
    # the replay says 4 h; the team started as many jobs as are ahead of this one in the last 16 h
    assert paced_start(4 * 3600.0, short, 400, 60.0, 16 * 3600.0) == pytest.approx(8 * 3600.0)
    assert paced_start(4 * 3600.0, short, 400, 60.0, None) == 4 * 3600.0  # no history: the replay
    # a pace of 0 (starts at the same instant) counts as 1 s, not as an estimate of 0
    assert paced_start(100.0, short, 400, 60.0, 0.0) == pytest.approx(10.0)


def test_reasons_carry_usage_and_share() -> None:
    standing = TeamStanding("vision", 6, 8, 0.61, 0.25, 0.18)
    reason = fair_share_reason(standing, 3)
    assert reason.code is WaitCode.FAIR_SHARE
    assert "61%" in reason.message and "25%" in reason.message and "3 jobs" in reason.message
    assert "may not borrow" in fair_share_reason(standing, 0).message
    assert spot_reason(1).code is WaitCode.SPOT and "1 job ahead" in spot_reason(1).message
    dep = dependency_reason(["a", "b", "c", "d"])
    assert dep.code is WaitCode.DEPENDENCY and dep.message == "waits for a, b, c and 1 more to complete"


@pytest.mark.parametrize("code", ["fair_share", "spot", "dependency", "next", "locked"])
def test_codes_are_added_not_changed(code: str) -> None:
    assert WaitCode(code).value == code
