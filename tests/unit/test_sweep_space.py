"""Unit tests for a sweep's search space and its sampling with Optuna (pure, no I/O)."""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import sweep_space
from cloudlet.domain.jobs.sweep_sampling import PastTrial, TrialState, propose, trial_seed

N = 400


def sample(expr: dict[str, Any], n: int = N, seed: int = 7) -> list[Any]:
    space = {"x": sweep_space.parse_expression(expr, "search_space.x")}
    return [p["x"] for p in propose(space, "random", seed, False, [], list(range(n)))]


def multiple_of(value: float, q: float) -> bool:
    return abs(value / q - round(value / q)) < 1e-9


def test_choice_and_randint() -> None:
    values = sample({"type": "choice", "values": ["gbdt", "dart", 3, 0.5, True]})
    assert set(values) == {"gbdt", "dart", 3, 0.5, True}
    ints = sample({"type": "randint", "upper": 5})
    assert set(ints) == {0, 1, 2, 3, 4} and all(type(v) is int for v in ints)


def test_uniform_and_quniform() -> None:
    values = sample({"type": "uniform", "min_value": 0.01, "max_value": 0.9})
    assert all(0.01 <= v <= 0.9 for v in values)
    assert statistics.fmean(values) == pytest.approx(0.455, abs=0.05)
    q = sample({"type": "quniform", "min_value": 0.5, "max_value": 3.5, "q": 0.25})
    assert all(multiple_of(v, 0.25) and 0.5 <= v <= 3.5 for v in q)
    assert len(set(q)) == 13  # 0.5, 0.75, … 3.5
    whole = sample({"type": "quniform", "min_value": 16, "max_value": 128, "q": 16})
    assert all(type(v) is int and v % 16 == 0 and 16 <= v <= 128 for v in whole)  # integers for a whole q


def test_loguniform_is_exp_of_uniform() -> None:
    values = sample({"type": "loguniform", "min_value": -6, "max_value": 0})
    assert all(math.exp(-6) <= v <= 1 for v in values)
    assert statistics.fmean(math.log(v) for v in values) == pytest.approx(-3, abs=0.3)
    q = sample({"type": "qloguniform", "min_value": 0, "max_value": 5, "q": 2})
    assert all(type(v) is int and v % 2 == 0 and 0 <= v <= 148 for v in q)
    assert statistics.median(q) < 40  # log-scaled: most mass at the low end (median ≈ e^2.5 ≈ 12)


def test_normal_family() -> None:
    values = sample({"type": "normal", "mu": 10, "sigma": 3}, n=1000)
    assert statistics.fmean(values) == pytest.approx(10, abs=0.4)
    assert statistics.stdev(values) == pytest.approx(3, rel=0.12)
    assert min(values) < 5 and max(values) > 15  # not bounded to a range
    q = sample({"type": "qnormal", "mu": 0, "sigma": 1, "q": 0.5})
    assert all(multiple_of(v, 0.5) for v in q) and any(v < 0 for v in q)
    log = sample({"type": "lognormal", "mu": 0, "sigma": 0.5}, n=1000)
    assert all(v > 0 for v in log)
    assert statistics.fmean(math.log(v) for v in log) == pytest.approx(0, abs=0.06)
    qlog = sample({"type": "qlognormal", "mu": 2, "sigma": 0.5, "q": 1})
    assert all(type(v) is int and v >= 0 for v in qlog)


def test_internal_round_trip() -> None:
    exprs = [
        {"type": "uniform", "min_value": 0, "max_value": 2},
        {"type": "loguniform", "min_value": -3, "max_value": 1},
        {"type": "normal", "mu": 1, "sigma": 2},
        {"type": "lognormal", "mu": 0, "sigma": 1},
    ]
    for raw in exprs:
        expr = sweep_space.parse_expression(raw, "x")
        for value in sample(raw, n=20):
            internal = sweep_space.to_internal(expr, value)
            assert sweep_space.to_value(expr, internal) == pytest.approx(value, rel=1e-6)
    choice = sweep_space.parse_expression({"type": "choice", "values": [16, 32, "a"]}, "x")
    assert sweep_space.to_internal(choice, "32") == 32  # came back through a document as text
    assert sweep_space.to_internal(choice, 64) is None
    randint = sweep_space.parse_expression({"type": "randint", "upper": 3}, "x")
    assert sweep_space.to_internal(randint, 3) is None and sweep_space.to_internal(randint, "b") is None


def test_sampling_is_repeatable_per_trial_number() -> None:
    space = {"x": sweep_space.parse_expression({"type": "uniform", "min_value": 0, "max_value": 1}, "x")}
    first = propose(space, "random", 1, False, [], [0, 1, 2])
    assert propose(space, "random", 1, False, [], [2]) == first[2:]  # trial 2 alone: the same value
    assert propose(space, "random", 2, False, [], [0, 1, 2]) != first
    assert trial_seed(1, 2) == trial_seed(1, 2) != trial_seed(1, 3)


def test_grid_covers_every_point_once() -> None:
    space = sweep_space.parse_space(
        {"a": {"type": "choice", "values": [1, 2]}, "b": {"type": "choice", "values": ["x", "y", "z"]}}
    )
    assert sweep_space.grid_size(space) == 6
    together = propose(space, "grid", 3, False, [], list(range(6)))
    assert len({(p["a"], p["b"]) for p in together}) == 6
    # One at a time, each pass seeing the ones before (finished, failed or running).
    past: list[PastTrial] = []
    states = [TrialState.COMPLETE, TrialState.FAILED, TrialState.RUNNING]
    for number in range(6):
        (params,) = propose(space, "grid", 3, False, past, [number])
        state = states[number % 3]
        past.append(PastTrial(number, params, state, 1.0 if state is TrialState.COMPLETE else None))
    assert len({(t.params["a"], t.params["b"]) for t in past}) == 6


def test_bayesian_beats_random_on_a_toy_objective() -> None:
    """A loose, seeded check: TPE's best after 30 trials is better than random's on most seeds."""
    space = sweep_space.parse_space(
        {
            "x": {"type": "uniform", "min_value": -4, "max_value": 4},
            "y": {"type": "quniform", "min_value": -4, "max_value": 4, "q": 0.1},
            "c": {"type": "choice", "values": ["a", "b", "c"]},
        }
    )

    def objective(p: dict[str, Any]) -> float:
        return (p["x"] - 1.3) ** 2 + (p["y"] + 0.7) ** 2 + (0.0 if p["c"] == "b" else 2.0)

    def best(algorithm: str, seed: int) -> float:
        past: list[PastTrial] = []
        for number in range(0, 30, 2):  # two at a time, as a sweep with max_concurrent_trials 2
            for offset, params in enumerate(
                propose(space, algorithm, seed, False, past, [number, number + 1])
            ):
                past.append(PastTrial(number + offset, params, TrialState.COMPLETE, objective(params)))
        return min(t.value for t in past if t.value is not None)

    wins = sum(best("bayesian", seed) < best("random", seed) for seed in range(5))
    assert wins >= 4


def test_parse_errors_name_the_field() -> None:
    cases = [
        ({"x": {"type": "gaussian", "mu": 0}}, "search_space.x.type", "use one of"),
        ({"x": {"type": "uniform", "min_value": 2, "max_value": 1}}, "search_space.x.max_value", "greater"),
        ({"x": {"type": "quniform", "min_value": 0, "max_value": 1}}, "search_space.x.q", "required"),
        ({"x": {"type": "quniform", "min_value": 0, "max_value": 1, "q": 0}}, "search_space.x.q", "greater"),
        ({"x": {"type": "normal", "mu": 0, "sigma": -1}}, "search_space.x.sigma", "greater"),
        ({"x": {"type": "choice", "values": []}}, "search_space.x.values", ""),
        ({"x": {"type": "choice", "values": [{"a": 1}]}}, "search_space.x.values", "nested"),
        ({"x": {"type": "randint", "upper": 0}}, "search_space.x.upper", "greater"),
        (
            {"x": {"type": "uniform", "min_value": 0, "max_value": 1, "step": 2}},
            "search_space.x.step",
            "unknown",
        ),
        ({"x": 3}, "search_space.x", "mapping"),
        ({}, "search_space", "hyperparameter"),
    ]
    for space, target, words in cases:
        with pytest.raises(CloudletError) as caught:
            sweep_space.parse_space(space)
        assert caught.value.target == target, (space, caught.value.target, caught.value.message)
        assert words in caught.value.message
