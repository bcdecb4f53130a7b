"""Wait estimates and the new reason codes."""

from __future__ import annotations

import pytest

from cloudlet.domain.jobs.job_wait import WaitCode
from cloudlet.domain.jobs.wait_estimate import (
    UNKNOWN_DURATION_S,
    Ahead,
    RunningEnd,
    TeamStanding,
    dependency_reason,
    estimate_start,
    expected_remaining,
    fair_share_reason,
    spot_reason,
)


def test_expected_remaining_from_history_timeout_and_fallbacks() -> None:
    history = [10.0, 100.0, 200.0, 400.0]
    assert expected_remaining(0.0, history) == 150.0  # median of all
    assert expected_remaining(150.0, history) == 150.0  # median of 200, 400 less 150
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
