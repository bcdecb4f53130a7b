"""Which hyperparameters a sweep's next trials get (pure: no I/O, no state kept between calls).

Each call rebuilds an in-memory Optuna study from the trials so far — a trial's sampled values are
its parameters, its final primary metric its value, running trials ``RUNNING``, trials stopped
early ``PRUNED`` with their metric series, failed ones ``FAIL`` — and asks it for the new trials,
each with a sampler seeded from the sweep's seed and the trial's number: the same trials so far
ask the same thing, so a repeated pass proposes the same trials.

- ``random`` → ``RandomSampler``: a trial's values depend on the seed and its number alone, so no
  study of the past is built.
- ``grid`` → ``BruteForceSampler``: Optuna's exhaustive search, which reads what was tried from the
  trials' parameters (``GridSampler`` keeps its bookkeeping in trial system attributes that a study
  rebuilt from the trials does not have). The caller stops at the grid's size.
- ``bayesian`` → ``TPESampler`` with ``constant_liar`` (running trials count as tried, so trials
  asked together differ). Azure's bayesian sampling is a Gaussian process; Optuna's ``GPSampler``
  needs PyTorch and SciPy in the server process, which cloudlet's server does not depend on
  (docs/sweeps.md has the comparison).
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from cloudlet.domain.jobs import sweep_space

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler
    from optuna.study import Study


class TrialState(StrEnum):
    RUNNING = "running"
    COMPLETE = "complete"  # ended with a value for the primary metric
    PRUNED = "pruned"  # stopped early (its series so far)
    FAILED = "failed"  # failed, or ended without a value


@dataclass(frozen=True)
class PastTrial:
    number: int
    params: Mapping[str, Any]  # the values it was given
    state: TrialState
    value: float | None = None  # COMPLETE: the final primary metric
    series: Sequence[float] = field(default_factory=tuple)  # PRUNED: the metric as reported


def trial_seed(base: int, number: int) -> int:
    """The seed of trial ``number``'s sampler: a hash of the sweep's seed and the number."""
    digest = hashlib.sha256(f"{base}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def name_seed(name: str) -> int:
    """A sweep without ``sampling_algorithm.seed`` is seeded from its name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")


def propose(
    space: Mapping[str, Mapping[str, Any]],
    algorithm: str,
    seed: int,
    maximize: bool,
    past: Sequence[PastTrial],
    numbers: Sequence[int],
) -> list[dict[str, Any]]:
    """The values of trials ``numbers`` (in order), given the trials so far."""
    if not numbers:
        return []
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {name: sweep_space.optuna_distribution(expr) for name, expr in space.items()}
    study = optuna.create_study(direction="maximize" if maximize else "minimize")
    if algorithm != "random":  # random sampling never looks at the past
        _add_past(study, space, distributions, past)
    proposals: list[dict[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for number in numbers:
            study.sampler = _sampler(algorithm, trial_seed(seed, number))
            asked = study.ask(distributions)  # stays RUNNING: the next ask sees it
            proposals.append({name: sweep_space.to_value(space[name], asked.params[name]) for name in space})
    return proposals


def _sampler(algorithm: str, seed: int) -> BaseSampler:
    from optuna import samplers

    if algorithm == "grid":
        return samplers.BruteForceSampler(seed=seed)
    if algorithm == "bayesian":
        return samplers.TPESampler(seed=seed, constant_liar=True)
    return samplers.RandomSampler(seed=seed)


def _add_past(
    study: Study,
    space: Mapping[str, Mapping[str, Any]],
    distributions: Mapping[str, Any],
    past: Sequence[PastTrial],
) -> None:
    from optuna.trial import TrialState as OptunaState
    from optuna.trial import create_trial

    for trial in sorted(past, key=lambda t: t.number):
        params = {name: sweep_space.to_internal(expr, trial.params.get(name)) for name, expr in space.items()}
        if any(value is None for value in params.values()):
            continue  # not a point of this space (the trial's inputs were changed): nothing to learn
        state, value, intermediate = OptunaState.FAIL, None, None
        if trial.state is TrialState.RUNNING:
            state = OptunaState.RUNNING
        elif trial.state is TrialState.COMPLETE and _finite(trial.value):
            state, value = OptunaState.COMPLETE, trial.value
        elif trial.state is TrialState.PRUNED and trial.series and all(_finite(v) for v in trial.series):
            state = OptunaState.PRUNED
            intermediate = {step: float(v) for step, v in enumerate(trial.series)}
        study.add_trial(
            create_trial(
                state=state,
                value=value,
                params=params,
                distributions=dict(distributions),
                intermediate_values=intermediate,
            )
        )


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
