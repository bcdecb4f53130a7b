"""Unit tests for sweep early-termination policies over hand-made metric series (pure)."""

from __future__ import annotations

from typing import Any

from cloudlet.domain.jobs.early_termination import evaluation_point, to_stop


def stopped(
    policy: dict[str, Any], series: dict[str, list[float]], maximize: bool = True, **kw: Any
) -> list[str]:
    active = kw.pop("active", set(series))
    return [s.key for s in to_stop(policy, maximize, series, active, **kw)]


def test_evaluation_points_follow_interval_and_delay() -> None:
    policy = {"type": "bandit", "slack_factor": 0.1, "evaluation_interval": 2, "delay_evaluation": 5}
    assert [evaluation_point(policy, n) for n in range(0, 9)] == [None, None, None, None, None, None, 6, 6, 8]
    assert evaluation_point({"type": "bandit", "evaluation_interval": 1}, 1) == 1
    assert evaluation_point({"type": "bandit", "evaluation_interval": 0}, 3) == 3  # 0: every report


def test_bandit_slack_factor_maximize() -> None:
    policy = {"type": "bandit", "slack_factor": 0.2, "evaluation_interval": 1, "delay_evaluation": 0}
    # Azure's example: best 0.8 at the interval, slack 0.2 → trials below 0.8 / 1.2 = 0.667 stop.
    series = {"0": [0.5, 0.8], "1": [0.6, 0.65], "2": [0.4, 0.7]}
    assert stopped(policy, series) == ["1"]
    (stop,) = to_stop(policy, True, series, {"1"})
    assert (
        "bandit" in stop.reason
        and "0.65" in stop.reason
        and "0.8" in stop.reason
        and "interval 2" in stop.reason
    )
    assert stopped(policy, series, active={"0", "2"}) == []  # only active trials are stopped


def test_bandit_minimize_and_slack_amount() -> None:
    factor = {"type": "bandit", "slack_factor": 0.1}
    assert stopped(factor, {"0": [1.0], "1": [1.2], "2": [1.05]}, maximize=False) == ["1"]
    amount = {"type": "bandit", "slack_amount": 0.5}
    assert stopped(amount, {"0": [3.0], "1": [2.4], "2": [2.6]}) == ["1"]
    assert stopped(amount, {"0": [3.0], "1": [3.6], "2": [3.4]}, maximize=False) == ["1"]
    # A negative best: the limit stays on the worse side, the best trial is never stopped.
    assert stopped(factor, {"0": [-1.0], "1": [-1.05], "2": [-1.2]}) == ["2"]


def test_bandit_waits_for_the_delay() -> None:
    policy = {"type": "bandit", "slack_amount": 0.1, "delay_evaluation": 3}
    assert stopped(policy, {"0": [1, 1], "1": [0, 0]}) == []
    assert stopped(policy, {"0": [1, 1, 1], "1": [0, 0, 0]}) == ["1"]


def test_bandit_compares_at_the_same_interval() -> None:
    policy = {"type": "bandit", "slack_amount": 0.1}
    # Trial 0 is great by interval 3, but at interval 1 (trial 1's latest) it had only 0.5.
    assert stopped(policy, {"0": [0.5, 0.9, 1.0], "1": [0.45]}) == []
    assert stopped(policy, {"0": [0.5, 0.9, 1.0], "1": [0.45, 0.5]}) == ["1"]


def test_median_stopping() -> None:
    policy = {"type": "median_stopping", "evaluation_interval": 1, "delay_evaluation": 2}
    series = {"0": [0.5, 0.7], "1": [0.6, 0.8], "2": [0.1, 0.2], "3": [0.55, 0.6]}
    # Running averages at interval 2: 0.6, 0.7, 0.15, 0.575 → median 0.5875; trial 2's best 0.2 is below.
    assert stopped(policy, series) == ["2"]
    (stop,) = to_stop(policy, True, series, {"2"})
    assert "median" in stop.reason and "0.5875" in stop.reason and "4 trials" in stop.reason
    assert stopped(policy, {"0": [0.1, 0.1]}) == []  # alone: nothing to compare with
    assert stopped(policy, series, maximize=False) == ["1"]  # minimize: best 0.6 > median 0.5875


def test_truncation_selection() -> None:
    policy = {"type": "truncation_selection", "truncation_percentage": 50, "evaluation_interval": 1}
    series = {"0": [0.9], "1": [0.2], "2": [0.5], "3": [0.1]}
    assert sorted(stopped(policy, series)) == ["1", "3"]
    assert sorted(stopped(policy, series, maximize=False)) == ["0", "2"]
    # 20 % of 4 trials is 0.8: nobody is cut.
    assert stopped({**policy, "truncation_percentage": 20}, series) == []
    # Trials that completed count in the ranking unless exclude_finished_jobs.
    ended = {"0": [0.9], "1": [0.2], "2": [0.5], "3": [0.1]}
    assert stopped(policy, ended, active={"1"}, completed={"3"}) == ["1"]
    # Without the completed 0 and 2, trial 1 (0.2) ranks above trial 3 (0.1): it goes on.
    assert stopped({**policy, "exclude_finished_jobs": True}, ended, active={"1"}, completed={"2", "0"}) == []


def test_truncation_uses_the_value_at_the_interval() -> None:
    policy = {"type": "truncation_selection", "truncation_percentage": 50, "evaluation_interval": 2}
    # At interval 2: trial 0 = 0.3, trial 1 = 0.6 → trial 0 is cut even though it started better.
    assert stopped(policy, {"0": [0.9, 0.3], "1": [0.1, 0.6]}) == ["0"]
    assert stopped(policy, {"0": [0.9, 0.3, 0.2], "1": [0.1, 0.6]}) == ["0"]  # its latest point is 2


def test_non_finite_values_are_ignored() -> None:
    policy = {"type": "bandit", "slack_amount": 0.1}
    assert stopped(policy, {"0": [1.0], "1": [float("nan")]}) == []
