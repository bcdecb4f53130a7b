"""Sweep jobs (``type: sweep``, Azure ML's CLI v2 ``sweepJob`` YAML), pure.

A sweep runs one command — its ``trial`` — many times, each *trial* a child command job whose
hyperparameters are sampled from ``search_space`` (``domain.jobs.sweep_space``), judged by the
``objective`` metric each trial logs with ``mlflow.log_metric``. Nothing is stored beside the
children: a trial's sampled values are its literal inputs, its metric comes from the tracking
service (``ChildView.metrics``), so ``advance`` rebuilds everything from them on every pass:

- it stops the trials the ``early_termination`` policy names (``domain.jobs.early_termination``);
- it asks the sampler (``domain.jobs.sweep_sampling``: Optuna) for as many new trials as
  ``limits.max_concurrent_trials`` and ``limits.max_total_trials`` allow (a grid: its size);
- past ``limits.timeout`` (seconds since the sweep began) it cancels the running trials and ends
  the sweep ``Canceled``, as Azure does ("the system cancels the sweep job, including its trials");
- once every trial has ended it ends ``Completed`` naming the best trial (``best_trial``), or
  ``Failed`` when no trial reported the primary metric.

A trial's document: the trial's command with ``${{search_space.x}}`` made ``${{inputs.x}}`` (an
``${{inputs.x}}`` naming a hyperparameter works the same), the sweep's inputs plus one literal
input per hyperparameter, the sweep's outputs (each trial gets its own path), the sweep's compute,
and ``limits.trial_timeout`` as its ``limits.timeout``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cloudlet.domain.bounds import MAX_JOB_TIMEOUT_S
from cloudlet.domain.errors import CloudletError, document_for, validation_error
from cloudlet.domain.jobs import early_termination, sweep_sampling, sweep_space
from cloudlet.domain.jobs.job_spec import JOB_NAME_PATTERN, job_to_doc, parse_job
from cloudlet.domain.jobs.job_status import ACTIVE, JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView, NewChild, ParentContext, ParentStep
from cloudlet.domain.jobs.sweep_sampling import PastTrial, TrialState
from cloudlet.domain.validation import FieldProblem, translate

MAX_TRIALS = 1000  # Azure's bound on max_total_trials and max_concurrent_trials
ALGORITHMS = ("random", "grid", "bayesian")
POLICIES = ("bandit", "median_stopping", "truncation_selection")
TRIAL_FIELDS = ("command", "code", "environment", "environment_variables", "distribution", "resources")
SEARCH_SPACE_REF = re.compile(r"\$\{\{\s*search_space\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
ANY_SEARCH_SPACE_REF = re.compile(r"\$\{\{\s*search_space\.([^{}]*?)\s*\}\}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class TrialSpec(_Strict):
    type: Literal["command"] | None = None
    command: str
    code: str | None = None
    environment: Any = None
    environment_variables: dict[str, Any] | None = None
    distribution: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None


class SamplingAlgorithm(_Strict):
    type: Literal["random", "grid", "bayesian"]
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    rule: Literal["random", "sobol"] | None = None

    @field_validator("type", "rule", mode="before")
    @classmethod
    def _fold(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> SamplingAlgorithm:
        if self.type != "random" and (self.seed is not None or self.rule is not None):
            raise FieldProblem("type", f"'seed' and 'rule' apply to random sampling, not {self.type}")
        if self.rule == "sobol":
            raise FieldProblem(
                "rule", "rule 'sobol' is not supported yet; use rule: random (the default) with a seed"
            )
        return self


class Objective(_Strict):
    goal: Literal["minimize", "maximize"]
    primary_metric: str = Field(min_length=1, max_length=255)

    @field_validator("goal", mode="before")
    @classmethod
    def _fold(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class EarlyTermination(_Strict):
    type: Literal["bandit", "median_stopping", "truncation_selection"]
    evaluation_interval: int = Field(default=1, ge=0, le=1_000_000)
    delay_evaluation: int = Field(default=0, ge=0, le=1_000_000)
    slack_factor: float | None = Field(default=None, gt=0)
    slack_amount: float | None = Field(default=None, gt=0)
    truncation_percentage: int | None = Field(default=None, ge=1, le=99)
    exclude_finished_jobs: bool | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _fold(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        # Azure's REST casing too: Bandit, MedianStopping, TruncationSelection.
        return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", value).lower()

    @model_validator(mode="after")
    def _check(self) -> EarlyTermination:
        self.evaluation_interval = self.evaluation_interval or 1  # Azure: 0 means every report
        if self.type == "bandit":
            if (self.slack_factor is None) == (self.slack_amount is None):
                raise FieldProblem(
                    "slack_factor", "a bandit policy needs exactly one of slack_factor or slack_amount"
                )
        elif self.slack_factor is not None or self.slack_amount is not None:
            raise FieldProblem("slack_factor", f"slack_factor/slack_amount apply to bandit, not {self.type}")
        if self.type == "truncation_selection":
            if self.truncation_percentage is None:
                raise FieldProblem(
                    "truncation_percentage",
                    "a truncation_selection policy needs truncation_percentage (1–99)",
                )
        elif self.truncation_percentage is not None or self.exclude_finished_jobs is not None:
            raise FieldProblem(
                "truncation_percentage",
                f"truncation_percentage/exclude_finished_jobs apply to truncation_selection, not {self.type}",
            )
        return self


class Limits(_Strict):
    max_total_trials: int = Field(default=MAX_TRIALS, ge=1, le=MAX_TRIALS)
    max_concurrent_trials: int | None = Field(default=None, ge=1, le=MAX_TRIALS)
    timeout: int | None = Field(default=None, ge=1, le=MAX_JOB_TIMEOUT_S)
    trial_timeout: int | None = Field(default=None, ge=1, le=MAX_JOB_TIMEOUT_S)


class SweepJobSpec(_Strict):
    schema_: str | None = Field(default=None, alias="$schema")
    type: Literal["sweep"] = "sweep"
    name: str | None = Field(default=None, pattern=JOB_NAME_PATTERN.pattern)
    display_name: str | None = None
    experiment_name: str | None = None
    description: str | None = None
    tags: dict[str, Any] = Field(default_factory=dict)
    trial: Any
    inputs: dict[str, Any] = Field(default_factory=dict)
    outputs: dict[str, Any] = Field(default_factory=dict)
    compute: str | None = None
    search_space: Any
    sampling_algorithm: Any
    objective: Objective
    early_termination: Any = None
    limits: Limits = Field(default_factory=Limits)
    queue_settings: dict[str, Any] | None = None
    identity: dict[str, Any] | None = None


# ----------------------------------------------------------------------------------------------
# Parsing.


def parse_sweep(doc: Any, name: str | None = None) -> dict[str, Any]:
    """Validate a sweep job document; returns its stored form (errors name the field and the fix)."""
    doc = document_for(doc, name, "sweep job")
    kind = doc.get("type", "sweep")
    if not isinstance(kind, str) or kind.lower() != "sweep":
        raise validation_error("type", f"a sweep job has type: sweep, not {kind!r}", code="InvalidJobType")
    doc["type"] = "sweep"
    try:
        spec = SweepJobSpec.model_validate(doc)
    except ValidationError as exc:
        raise translate(exc, SweepJobSpec, "a sweep job") from None
    trial = _parse_trial(spec.trial)
    space = sweep_space.parse_space(spec.search_space)
    algorithm = _parse_algorithm(spec.sampling_algorithm)
    policy = _parse_policy(spec.early_termination)
    _check_rules(space, algorithm, policy)
    for key in space:
        if key in spec.inputs:
            raise validation_error(
                f"search_space.{key}",
                f"'{key}' is both an input and a hyperparameter; rename one (a trial gets the sampled "
                f"value as its input '{key}')",
            )
    _check_refs(trial.command, space)
    stored: dict[str, Any] = {"type": "sweep"}
    for key in ("name", "display_name", "experiment_name", "description"):
        if getattr(spec, key) is not None:
            stored[key] = getattr(spec, key)
    if spec.tags:
        stored["tags"] = {str(k): v if isinstance(v, str) else str(v) for k, v in spec.tags.items()}
    raw = {
        **stored,
        "trial": trial.model_dump(exclude_none=True, exclude={"type"}),
        "inputs": spec.inputs,
        "outputs": spec.outputs,
        "compute": spec.compute,
        "search_space": space,
        "limits": spec.limits.model_dump(exclude_none=True),
        "queue_settings": spec.queue_settings,
        "identity": spec.identity,
    }
    probe = _check_trial_job(raw, space)
    stored["trial"] = {"command": trial.command}
    for key in TRIAL_FIELDS[1:]:
        if key in probe:
            stored["trial"][key] = probe[key]
    stored["inputs"] = {k: v for k, v in probe.get("inputs", {}).items() if k not in space}
    stored["outputs"] = probe.get("outputs", {})
    for key in ("compute", "queue_settings", "identity"):
        if key in probe:
            stored[key] = probe[key]
    stored["search_space"] = space
    stored["sampling_algorithm"] = algorithm
    stored["objective"] = spec.objective.model_dump()
    if policy is not None:
        stored["early_termination"] = policy
    limits = spec.limits.model_dump(exclude_none=True)
    limits.setdefault("max_concurrent_trials", limits["max_total_trials"])
    stored["limits"] = limits
    return stored


def _parse_trial(value: Any) -> TrialSpec:
    if isinstance(value, str):
        raise validation_error(
            "trial",
            f"a component as the trial ({value!r}) is not supported yet; write the trial inline "
            "(command, code, environment, resources)",
        )
    if not isinstance(value, dict):
        raise validation_error("trial", "'trial' must be a mapping with the command to run (trial.command)")
    try:
        return TrialSpec.model_validate(value)
    except ValidationError as exc:
        raise translate(exc, TrialSpec, "a sweep's trial", "trial") from None


def _parse_algorithm(value: Any) -> dict[str, Any]:
    if value is None:
        raise validation_error(
            "sampling_algorithm",
            f"'sampling_algorithm' is required for a sweep job: one of {', '.join(ALGORITHMS)}",
        )
    body = {"type": value} if isinstance(value, str) else value
    if not isinstance(body, dict):
        raise validation_error(
            "sampling_algorithm", f"sampling_algorithm must be one of {', '.join(ALGORITHMS)} or {{type: …}}"
        )
    try:
        return SamplingAlgorithm.model_validate(body).model_dump(exclude_none=True)
    except ValidationError as exc:
        raise translate(exc, SamplingAlgorithm, "a sampling algorithm", "sampling_algorithm") from None


def _parse_policy(value: Any) -> dict[str, Any] | None:
    if value is None or (isinstance(value, str) and value.lower() in ("none", "")):
        return None
    if isinstance(value, dict) and str(value.get("type", "")).lower() in ("none", "no_termination"):
        return None
    if not isinstance(value, dict):
        raise validation_error(
            "early_termination",
            f"early_termination must be a mapping such as {{type: bandit, slack_factor: 0.1}} "
            f"(types: {', '.join(POLICIES)})",
        )
    try:
        return EarlyTermination.model_validate(value).model_dump(exclude_none=True)
    except ValidationError as exc:
        raise translate(exc, EarlyTermination, "an early termination policy", "early_termination") from None


def _check_rules(
    space: Mapping[str, Mapping[str, Any]], algorithm: Mapping[str, Any], policy: Mapping[str, Any] | None
) -> None:
    """Azure's: grid takes only choice; bayesian only choice/uniform/quniform, no early termination."""
    kind = algorithm["type"]
    allowed = {"grid": sweep_space.GRID_TYPES, "bayesian": sweep_space.BAYESIAN_TYPES}.get(kind)
    if allowed is not None:
        for key, expr in space.items():
            if expr["type"] not in allowed:
                raise validation_error(
                    f"search_space.{key}.type",
                    f"{kind} sampling takes only {', '.join(sorted(allowed))} expressions, not "
                    f"{expr['type']}; change the expression or use sampling_algorithm: random",
                )
    if kind == "bayesian" and policy is not None:
        raise validation_error(
            "early_termination",
            "bayesian sampling does not support early termination (as in Azure ML); remove "
            "early_termination or use random or grid sampling",
        )


def _check_refs(command: str, space: Mapping[str, Any]) -> None:
    for ref in ANY_SEARCH_SPACE_REF.findall(command):
        if ref not in space:
            raise validation_error(
                "trial.command",
                f"trial.command uses '${{{{search_space.{ref}}}}}' but '{ref}' is not in search_space "
                f"(hyperparameters: {', '.join(space)}); add it or fix the name",
            )


def _check_trial_job(raw: Mapping[str, Any], space: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Validate the trial as the command job a trial is, with example values; errors are retargeted
    at the sweep's fields (``trial.command``, ``search_space.x``, ``limits.trial_timeout``)."""
    probe = trial_doc(raw, "0", {k: sweep_space.example_value(e) for k, e in space.items()})
    probe.pop("display_name", None)
    try:
        return job_to_doc(parse_job(probe))
    except CloudletError as exc:
        exc.target = _retarget(exc.target, space)
        for detail in exc.details:
            detail["target"] = _retarget(detail.get("target"), space)
        raise


def _retarget(target: str | None, space: Mapping[str, Any]) -> str | None:
    if not target:
        return target
    head, _, rest = target.partition(".")
    if head in TRIAL_FIELDS:
        return f"trial.{target}"
    if head == "inputs" and rest.split(".", 1)[0] in space:
        return f"search_space.{rest}"
    if target == "limits.timeout":
        return "limits.trial_timeout"
    return target


# ----------------------------------------------------------------------------------------------
# Trials.


def trial_doc(doc: Mapping[str, Any], key: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The command job document of trial ``key`` with hyperparameter values ``params``."""
    trial = dict(doc["trial"])
    child: dict[str, Any] = {
        "type": "command",
        "command": SEARCH_SPACE_REF.sub(r"${{inputs.\1}}", trial["command"]),
    }
    for field in TRIAL_FIELDS[1:]:
        if trial.get(field) is not None:
            child[field] = trial[field]
    child["inputs"] = {**(doc.get("inputs") or {}), **params}
    outputs = doc.get("outputs") or {}
    if outputs:  # each trial writes its own: no fixed path, nothing registered per trial
        child["outputs"] = {
            name: {k: v for k, v in (spec or {}).items() if k not in ("path", "name", "version")}
            for name, spec in outputs.items()
        }
    for field in ("compute", "experiment_name", "queue_settings", "identity"):
        if doc.get(field) is not None:
            child[field] = doc[field]
    trial_timeout = (doc.get("limits") or {}).get("trial_timeout")
    if trial_timeout:
        child["limits"] = {"timeout": trial_timeout}
    child["display_name"] = f"{doc.get('display_name') or doc.get('name') or 'sweep'} trial {key}"
    return child


def params_of(doc: Mapping[str, Any], child: ChildView) -> dict[str, Any]:
    """The hyperparameter values a trial was given (its literal inputs named in the search space)."""
    out: dict[str, Any] = {}
    for key in doc["search_space"]:
        value = child.inputs.get(key)
        if isinstance(value, Mapping):
            value = value.get("value", value.get("default"))
        out[key] = value
    return out


def series_of(doc: Mapping[str, Any], child: ChildView) -> list[float]:
    """The trial's primary metric, one value per report, in order (NaN and infinities left out:
    they rank nothing)."""
    values = (float(value) for _step, value in child.metrics.get(doc["objective"]["primary_metric"], ()))
    return [value for value in values if math.isfinite(value)]


@dataclass(frozen=True)
class BestTrial:
    key: str
    name: str
    value: float
    params: Mapping[str, Any]


def best_trial(doc: Mapping[str, Any], children: Sequence[ChildView]) -> BestTrial | None:
    """The Completed trial whose final primary metric is best (ties: the earlier trial)."""
    maximize = doc["objective"]["goal"] == "maximize"
    best: BestTrial | None = None
    for child in sorted(children, key=lambda c: _number(c.key)):
        series = series_of(doc, child)
        if child.status is not JobStatus.COMPLETED or not series:
            continue
        value = series[-1]
        if best is None or (value > best.value if maximize else value < best.value):
            best = BestTrial(child.key, child.name, value, params_of(doc, child))
    return best


def describe_best(doc: Mapping[str, Any], best: BestTrial) -> str:
    params = ", ".join(f"{k}={_short(v)}" for k, v in best.params.items())
    metric = doc["objective"]["primary_metric"]
    return f"best trial {best.key} ({best.name}): {metric}={best.value:.6g} with {params}"


def _past(doc: Mapping[str, Any], children: Sequence[ChildView]) -> list[PastTrial]:
    past = []
    for child in children:
        number = _number(child.key)
        if number < 0:
            continue
        series = series_of(doc, child)
        if child.status in ACTIVE:
            state, value = TrialState.RUNNING, None
        elif child.status is JobStatus.COMPLETED and series:
            state, value = TrialState.COMPLETE, series[-1]
        elif child.status is JobStatus.CANCELED and series:
            state, value = TrialState.PRUNED, None
        else:
            state, value = TrialState.FAILED, None
        past.append(PastTrial(number, params_of(doc, child), state, value, tuple(series)))
    return past


def total_trials(doc: Mapping[str, Any]) -> int:
    """How many trials the sweep runs at most (a grid: no more than its points)."""
    limit = int(doc["limits"]["max_total_trials"])
    if doc["sampling_algorithm"]["type"] == "grid":
        return min(limit, sweep_space.grid_size(doc["search_space"]))
    return limit


# ----------------------------------------------------------------------------------------------
# One pass.


def advance(doc: Mapping[str, Any], children: Sequence[ChildView], context: ParentContext) -> ParentStep:
    """What to do for the sweep now (see the module's docstring)."""
    active = [c.key for c in children if c.status in ACTIVE]
    best = best_trial(doc, children)
    best_words = describe_best(doc, best) if best else "no trial reported the primary metric"
    limits = doc["limits"]
    if context.cancel_requested:
        return ParentStep(
            cancel=tuple(active),
            cancel_reason="the sweep was canceled",
            outcome=JobStatus.CANCELED,
            message=f"canceled after {len(children)} trials; {best_words}",
        )
    timeout = limits.get("timeout")
    if timeout and context.now - context.started_at >= timeout:
        return ParentStep(
            cancel=tuple(active),
            cancel_reason=f"the sweep reached its limits.timeout ({timeout} s)",
            outcome=JobStatus.CANCELED,
            message=f"limits.timeout ({timeout} s) reached after {len(children)} trials; {best_words}",
        )
    maximize = doc["objective"]["goal"] == "maximize"
    stops: list[early_termination.Stop] = []
    policy = doc.get("early_termination")
    if policy:
        stops = early_termination.to_stop(
            policy,
            maximize,
            {c.key: series_of(doc, c) for c in children},
            frozenset(active),
            frozenset(c.key for c in children if c.status is JobStatus.COMPLETED),
        )
    # A trial being stopped holds its slot until it has ended (max_concurrent_trials is kept).
    free = min(
        int(limits["max_concurrent_trials"]) - len(active),
        total_trials(doc) - len(children),
    )
    submit: tuple[NewChild, ...] = ()
    if free > 0:
        start = max((_number(c.key) for c in children), default=-1) + 1
        numbers = list(range(start, start + free))
        algorithm = doc["sampling_algorithm"]
        seed = algorithm.get("seed")
        base = int(seed) if seed is not None else sweep_sampling.name_seed(str(doc.get("name") or ""))
        proposals = sweep_sampling.propose(
            doc["search_space"], algorithm["type"], base, maximize, _past(doc, children), numbers
        )
        submit = tuple(
            NewChild(key=str(n), doc=trial_doc(doc, str(n), params))
            for n, params in zip(numbers, proposals, strict=True)
        )
    progress = _progress(doc, children, len(active), best_words)
    if submit or active:
        return ParentStep(
            submit=submit,
            cancel=tuple(s.key for s in stops),
            reasons={s.key: s.reason for s in stops},
            progress=progress,
        )
    return _settle(doc, children, best, best_words)


def _settle(
    doc: Mapping[str, Any], children: Sequence[ChildView], best: BestTrial | None, best_words: str
) -> ParentStep:
    counts = _counts(children)
    if best is not None:
        return ParentStep(outcome=JobStatus.COMPLETED, message=f"{best_words}; {counts}", progress=best_words)
    metric = doc["objective"]["primary_metric"]
    if children and all(c.status is JobStatus.FAILED for c in children):
        first = min(children, key=lambda c: _number(c.key))
        why = f": {first.error}" if first.error else ""
        message = f"all {len(children)} trials failed; trial {first.key} ({first.name}){why}"
    else:
        message = (
            f"no trial reported the primary metric '{metric}' before it completed ({counts}); log it "
            f"in the training script with mlflow.log_metric('{metric}', value)"
        )
    return ParentStep(outcome=JobStatus.FAILED, message=message)


def _progress(doc: Mapping[str, Any], children: Sequence[ChildView], running: int, best_words: str) -> str:
    done = len(children) - running
    return f"{done} of {total_trials(doc)} trials done, {running} running; {best_words}"


def _counts(children: Sequence[ChildView]) -> str:
    by: dict[str, int] = {}
    for child in children:
        by[child.status.value] = by.get(child.status.value, 0) + 1
    words = {"Canceled": "stopped early or canceled"}
    parts = [f"{n} {words.get(s, s.lower())}" for s, n in sorted(by.items())]
    return f"{len(children)} trials: {', '.join(parts)}"


def _number(key: str) -> int:
    return int(key) if key.isdigit() else -1


def _short(value: Any) -> str:
    return (
        f"{value:.6g}" if isinstance(value, float) else repr(value) if isinstance(value, str) else str(value)
    )


class SweepKind:
    """The ``ParentKind`` of ``JobKind.SWEEP``."""

    def parse(self, doc: Any, name: str) -> dict[str, Any]:
        return parse_sweep(doc, name)

    def metric_keys(self, doc: Mapping[str, Any]) -> Sequence[str]:
        return [doc["objective"]["primary_metric"]]

    def advance(
        self, doc: Mapping[str, Any], children: Sequence[ChildView], context: ParentContext
    ) -> ParentStep:
        return advance(doc, children, context)


SWEEP = SweepKind()
