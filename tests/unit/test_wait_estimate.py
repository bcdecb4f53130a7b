"""Wait estimates and the new reason codes."""

from __future__ import annotations

import pytest

from cloudlet.domain.jobs.job_wait import WaitCode
from cloudlet.domain.jobs.wait_estimate import (
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
    spot_reason,
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
