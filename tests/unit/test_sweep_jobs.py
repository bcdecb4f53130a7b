"""Unit tests for sweep jobs: parsing Azure's sweepJob YAML and each pass's decision (pure)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_spec import parse_job, priority_value
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView, NewChild, ParentContext, ParentStep
from cloudlet.domain.jobs.sweep_jobs import SWEEP, advance, best_trial, parse_sweep, total_trials, trial_doc

# Azure's examples/jobs/basics/hello-sweep.yml, as written.
HELLO_SWEEP = """
$schema: https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json
type: sweep
trial:
  command: >-
    python hello-sweep.py
    --A ${{inputs.A}}
    --B ${{search_space.B}}
    --C ${{search_space.C}}
  code: src
  environment: azureml:sklearn-1.0@latest
inputs:
  A: 0.5
sampling_algorithm: random
search_space:
  B:
    type: choice
    values: ["hello", "world", "hello_world"]
  C:
    type: uniform
    min_value: 0.1
    max_value: 1.0
objective:
  goal: minimize
  primary_metric: random_metric
limits:
  max_total_trials: 4
  max_concurrent_trials: 2
  timeout: 3600
display_name: hello-sweep-example
experiment_name: hello-sweep-example
description: Hello sweep job example.
"""
NOW = ParentContext(now=1000.0, started_at=1000.0)


def hello(**changes: Any) -> dict[str, Any]:
    doc = yaml.safe_load(HELLO_SWEEP)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


def error_of(doc: Any) -> CloudletError:
    with pytest.raises(CloudletError) as caught:
        parse_sweep(doc, "sw")
    return caught.value


def child(new: NewChild, status: JobStatus, metric: list[float] | None = None, name: str = "") -> ChildView:
    return ChildView(
        key=new.key,
        name=name or f"sw-{new.key}",
        status=status,
        inputs=new.doc["inputs"],
        metrics={"random_metric": [(i, v) for i, v in enumerate(metric or [])]},
    )


def run(
    doc: dict[str, Any],
    score: Callable[[dict[str, Any]], list[float]],
    status: JobStatus = JobStatus.COMPLETED,
) -> tuple[list[ChildView], ParentStep, int]:
    """Run a sweep to its end: every submitted trial ends at once with SCORE's series."""
    children: list[ChildView] = []
    most_at_once = 0
    for _ in range(1000):
        step = advance(doc, children, NOW)
        if step.outcome is not None:
            return children, step, most_at_once
        most_at_once = max(most_at_once, len(step.submit))
        children += [child(new, status, score(new.doc["inputs"])) for new in step.submit]
    raise AssertionError("the sweep never ended")


# ----------------------------------------------------------------------------------------------
# Parsing.


def test_hello_sweep_parses_as_written() -> None:
    stored = parse_sweep(hello(), "sw")
    assert stored["type"] == "sweep" and stored["name"] == "sw"
    assert stored["trial"]["command"].endswith("--C ${{search_space.C}}")
    assert stored["trial"]["code"] == "src" and stored["trial"]["environment"] == "azureml:sklearn-1.0@latest"
    assert stored["inputs"] == {"A": 0.5}
    assert stored["sampling_algorithm"] == {"type": "random"}
    assert stored["objective"] == {"goal": "minimize", "primary_metric": "random_metric"}
    assert stored["limits"] == {"max_total_trials": 4, "max_concurrent_trials": 2, "timeout": 3600}
    assert stored["search_space"]["C"] == {"type": "uniform", "min_value": 0.1, "max_value": 1.0}
    assert parse_sweep(stored, "sw") == stored  # the stored form is a valid document
    assert SWEEP.parse(hello(), "sw") == stored and SWEEP.metric_keys(stored) == ["random_metric"]


# Azure's cli/jobs/single-step/lightgbm/iris/job-sweep.yml, as written.
LIGHTGBM_SWEEP = """
$schema: https://azuremlschemas.azureedge.net/latest/sweepJob.schema.json
type: sweep
trial:
  code: src
  command: >-
    python main.py
    --iris-csv ${{inputs.iris_csv}}
    --learning-rate ${{search_space.learning_rate}}
    --boosting ${{search_space.boosting}}
  environment: azureml:AzureML-lightgbm-3.2-ubuntu18.04-py37-cpu:11
inputs:
  iris_csv:
    type: uri_file
    path: https://azuremlexamples.blob.core.windows.net/datasets/iris.csv
compute: azureml:cpu-cluster
sampling_algorithm: random
search_space:
  learning_rate:
    type: uniform
    min_value: 0.01
    max_value: 0.9
  boosting:
    type: choice
    values: ["gbdt", "dart"]
objective:
  goal: minimize
  primary_metric: test-multi_logloss
limits:
  max_total_trials: 20
  max_concurrent_trials: 10
  timeout: 7200
display_name: lightgbm-iris-sweep-example
experiment_name: lightgbm-iris-sweep-example
description: Run a hyperparameter sweep job for LightGBM on Iris dataset.
"""


def test_lightgbm_sweep_parses_and_its_trials_take_the_data_input() -> None:
    stored = parse_sweep(yaml.safe_load(LIGHTGBM_SWEEP), "lgbm")
    assert stored["inputs"]["iris_csv"]["type"] == "uri_file"
    assert stored["compute"] == "cpu-cluster" and stored["limits"]["max_concurrent_trials"] == 10
    step = advance(stored, [], NOW)
    assert len(step.submit) == 10
    trial = parse_job(step.submit[0].doc)
    assert trial.inputs["iris_csv"].path.startswith("https://")  # type: ignore[union-attr]
    assert trial.environment == "azureml:AzureML-lightgbm-3.2-ubuntu18.04-py37-cpu:11"


def test_full_shapes_parse() -> None:
    doc = hello(
        sampling_algorithm={"type": "Random", "seed": 42, "rule": "random"},
        early_termination={"type": "MedianStopping", "evaluation_interval": 2, "delay_evaluation": 4},
        objective={"goal": "Maximize", "primary_metric": "acc"},
        compute="azureml:cpu-cluster",
        outputs={"model": {"type": "uri_folder"}},
        limits={"max_total_trials": 8, "trial_timeout": 60},
    )
    doc["trial"]["resources"] = {"instance_count": 1}
    doc["trial"]["environment_variables"] = {"X": "1"}
    stored = parse_sweep(doc, "sw")
    assert stored["sampling_algorithm"] == {"type": "random", "seed": 42, "rule": "random"}
    assert stored["early_termination"]["type"] == "median_stopping"
    assert stored["objective"]["goal"] == "maximize" and stored["compute"] == "cpu-cluster"
    assert stored["limits"]["max_concurrent_trials"] == 8  # Azure: defaults to max_total_trials
    assert stored["outputs"]["model"]["type"] == "uri_folder"
    assert parse_sweep(hello(limits=None), "sw")["limits"]["max_total_trials"] == 1000


@pytest.mark.parametrize(
    ("changes", "target", "words"),
    [
        ({"sampling_algorithm": "annealing"}, "sampling_algorithm.type", "random"),
        ({"sampling_algorithm": None}, "sampling_algorithm", "required"),
        ({"sampling_algorithm": {"type": "random", "rule": "sobol"}}, "sampling_algorithm.rule", "sobol"),
        ({"sampling_algorithm": {"type": "grid", "seed": 1}}, "sampling_algorithm.type", "seed"),
        ({"sampling_algorithm": "grid"}, "search_space.C.type", "grid sampling takes only choice"),
        (
            {
                "sampling_algorithm": "bayesian",
                "search_space": {"B": {"type": "normal", "mu": 0, "sigma": 1}},
            },
            "search_space.B.type",
            "bayesian sampling takes only choice, quniform, uniform",
        ),
        (
            {"sampling_algorithm": "bayesian", "early_termination": {"type": "bandit", "slack_factor": 0.1}},
            "early_termination",
            "does not support early termination",
        ),
        ({"early_termination": {"type": "bandit"}}, "early_termination.slack_factor", "exactly one"),
        (
            {"early_termination": {"type": "truncation_selection"}},
            "early_termination.truncation_percentage",
            "",
        ),
        (
            {"early_termination": {"type": "bandit", "slack_amount": 1, "truncation_percentage": 5}},
            "",
            "apply",
        ),
        ({"early_termination": {"type": "asha"}}, "early_termination.type", ""),
        ({"objective": {"goal": "up", "primary_metric": "m"}}, "objective.goal", "minimize"),
        ({"objective": None}, "objective", "required"),
        ({"limits": {"max_total_trials": 0}}, "limits.max_total_trials", "≥ 1"),
        ({"limits": {"max_concurrent_trials": 1001}}, "limits.max_concurrent_trials", "≤ 1000"),
        ({"limits": {"trial_timeout": -1}}, "limits.trial_timeout", "≥ 1"),
        ({"trial": "./train.yml"}, "trial", "component"),
        ({"trial": {"code": "src"}}, "trial.command", "required"),
        ({"trial": {"command": "python x.py", "gpus": 1}}, "trial.gpus", "unknown"),
        ({"search_space": {"A": {"type": "choice", "values": [1]}}}, "search_space.A", "both an input"),
        ({"type": "command"}, "type", "sweep"),
        ({"colour": "red"}, "colour", "unknown field"),
    ],
)
def test_refusals_name_the_field(changes: dict[str, Any], target: str, words: str) -> None:
    error = error_of(hello(**changes))
    assert error.target is not None and error.target.startswith(target), (error.target, error.message)
    assert words in error.message, error.message


def test_trial_errors_point_at_the_sweep_fields() -> None:
    doc = hello()
    doc["trial"]["command"] = "python x.py --lr ${{search_space.lr}}"
    error = error_of(doc)
    assert error.target == "trial.command" and "'lr' is not in search_space" in error.message
    doc["trial"]["command"] = "python x.py --d ${{inputs.data}}"
    error = error_of(doc)
    assert error.target == "trial.command" and "'data' is not declared" in error.message
    doc = hello()
    doc["trial"]["resources"] = {"instance_count": 0}
    assert error_of(doc).target == "trial.resources.instance_count"
    doc = hello()
    doc["trial"]["distribution"] = {"type": "horovod"}
    assert error_of(doc).target == "trial.distribution.type"


# ----------------------------------------------------------------------------------------------
# Passes.


def test_first_pass_submits_trial_jobs_that_parse() -> None:
    stored = parse_sweep(
        hello(compute="cpu-cluster", limits={"max_total_trials": 4, "trial_timeout": 30}), "sw"
    )
    step = advance(stored, [], NOW)
    assert [new.key for new in step.submit] == ["0", "1", "2", "3"]  # concurrency defaults to the total
    doc = step.submit[0].doc
    assert doc["command"] == "python hello-sweep.py --A ${{inputs.A}} --B ${{inputs.B}} --C ${{inputs.C}}"
    assert doc["inputs"]["A"] == 0.5 and doc["inputs"]["B"] in ("hello", "world", "hello_world")
    assert 0.1 <= doc["inputs"]["C"] <= 1.0
    assert doc["compute"] == "cpu-cluster" and doc["limits"] == {"timeout": 30}
    assert doc["experiment_name"] == "hello-sweep-example"
    for new in step.submit:
        parse_job(new.doc)  # each trial is a valid command job
    assert step.outcome is None and "0 of 4 trials done" in (step.progress or "")


def test_limits_and_repeatable_passes() -> None:
    stored = parse_sweep(hello(), "sw")
    first = advance(stored, [], NOW)
    assert [new.key for new in first.submit] == ["0", "1"]  # max_concurrent_trials 2
    assert advance(copy.deepcopy(stored), [], NOW) == first  # a repeated pass asks the same
    running = [child(new, JobStatus.RUNNING) for new in first.submit]
    assert advance(stored, running, NOW).submit == ()  # both slots taken
    one_done = [child(first.submit[0], JobStatus.COMPLETED, [0.3]), running[1]]
    second = advance(stored, one_done, NOW)
    assert [new.key for new in second.submit] == ["2"]
    assert advance(stored, one_done, NOW) == second
    children = [*one_done, child(second.submit[0], JobStatus.RUNNING)]
    third = advance(
        stored, [children[0], child(first.submit[1], JobStatus.COMPLETED, [0.2]), children[2]], NOW
    )
    assert [new.key for new in third.submit] == ["3"]  # and then max_total_trials (4) is reached


def test_completed_sweep_reports_the_best_trial() -> None:
    stored = parse_sweep(hello(), "sw")
    children, step, most = run(stored, lambda inputs: [1.0, inputs["C"]])
    assert len(children) == 4 and most == 2
    assert step.outcome is JobStatus.COMPLETED
    best = best_trial(stored, children)
    assert best is not None and best.value == min(c.inputs["C"] for c in children)
    assert f"best trial {best.key} (sw-{best.key}): random_metric=" in (step.message or "")
    assert "4 trials: 4 completed" in (step.message or "")
    assert best.params == {"B": children[int(best.key)].inputs["B"], "C": best.value}


def test_failed_and_metricless_sweeps_fail() -> None:
    stored = parse_sweep(hello(), "sw")
    _, step, _ = run(stored, lambda inputs: [], JobStatus.FAILED)
    assert step.outcome is JobStatus.FAILED and "all 4 trials failed" in (step.message or "")
    _, step, _ = run(stored, lambda inputs: [])
    assert step.outcome is JobStatus.FAILED
    assert "mlflow.log_metric('random_metric', value)" in (step.message or "")


def test_grid_runs_each_point_once() -> None:
    doc = hello(
        sampling_algorithm="grid",
        search_space={
            "B": {"type": "choice", "values": ["a", "b"]},
            "C": {"type": "choice", "values": [1, 2, 3]},
        },
        limits={"max_concurrent_trials": 4},
    )
    stored = parse_sweep(doc, "sw")
    assert total_trials(stored) == 6  # the grid's size, not max_total_trials (1000)
    children, step, _ = run(stored, lambda inputs: [float(inputs["C"])])
    assert sorted((c.inputs["B"], c.inputs["C"]) for c in children) == [
        (b, c) for b in ("a", "b") for c in (1, 2, 3)
    ]
    assert step.outcome is JobStatus.COMPLETED and best_trial(stored, children).value == 1.0  # type: ignore[union-attr]


def test_bayesian_sweep_completes() -> None:
    doc = hello(sampling_algorithm="bayesian", limits={"max_total_trials": 8, "max_concurrent_trials": 2})
    stored = parse_sweep(doc, "sw")
    children, step, _ = run(stored, lambda inputs: [(inputs["C"] - 0.4) ** 2])
    assert len(children) == 8 and step.outcome is JobStatus.COMPLETED
    assert len({c.inputs["C"] for c in children}) == 8  # no trial asked twice


def test_early_termination_cancels_with_a_reason() -> None:
    doc = hello(early_termination={"type": "bandit", "slack_amount": 0.1, "evaluation_interval": 1})
    stored = parse_sweep(doc, "sw")
    first = advance(stored, [], NOW)
    children = [
        child(first.submit[0], JobStatus.RUNNING, [0.2, 0.1]),
        child(first.submit[1], JobStatus.RUNNING, [0.5, 0.6]),
    ]
    step = advance(stored, children, NOW)
    assert step.cancel == ("1",) and step.submit == ()  # the stopped trial holds its slot until it ends
    assert step.reasons["1"].startswith("bandit policy at interval 2")
    stopped = [children[0], child(first.submit[1], JobStatus.CANCELED, [0.5, 0.6])]
    after = advance(stored, stopped, NOW)
    assert [new.key for new in after.submit] == ["2"] and after.cancel == ()


def test_timeout_and_cancel_end_the_sweep_canceled() -> None:
    stored = parse_sweep(hello(), "sw")
    first = advance(stored, [], NOW)
    children = [child(first.submit[0], JobStatus.COMPLETED, [0.3]), child(first.submit[1], JobStatus.RUNNING)]
    late = ParentContext(now=NOW.started_at + 3600, started_at=NOW.started_at)
    step = advance(stored, children, late)
    assert step.outcome is JobStatus.CANCELED and step.cancel == ("1",) and step.submit == ()
    assert "limits.timeout (3600 s)" in step.cancel_reason and "best trial 0" in (step.message or "")
    canceled = advance(
        stored, children, ParentContext(now=NOW.now, started_at=NOW.now, cancel_requested=True)
    )
    assert canceled.outcome is JobStatus.CANCELED and canceled.cancel == ("1",)


def test_trials_inherit_the_sweeps_queue_settings_in_the_entity_shape() -> None:
    """A sweep's ``queue_settings`` is read by the one parser and each trial carries it (so each
    trial's ``jobs.priority`` and ``jobs.job_tier`` are the sweep's); a bad one names the field."""
    doc = parse_sweep(hello(queue_settings={"priority": "HIGH", "jobTier": "Spot"}), "sw")
    assert doc["queue_settings"] == {"job_tier": "spot", "priority": "high"}
    trial = trial_doc(doc, "0", {"B": "hello", "C": 0.5})
    assert trial["queue_settings"] == {"job_tier": "spot", "priority": "high"}
    assert priority_value(parse_job(trial, "sw-0")) == 3
    assert error_of(hello(queue_settings={"priority": "urgent"})).target == "queue_settings.priority"
