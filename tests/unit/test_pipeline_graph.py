"""A pipeline's graph for the studio's full page (``domain.jobs.pipeline_graph``): its inputs and
outputs as nodes, one edge per binding named by its ports, a step bound to another step's input
followed to the source, each step's component, inputs, outputs and reuse."""

from __future__ import annotations

from typing import Any

from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView
from cloudlet.domain.jobs.pipeline_graph import INPUT, OUTPUT, STEP, component_of, graph
from cloudlet.domain.jobs.pipeline_jobs import PIPELINE

TRAIN = {
    "type": "command",
    "name": "train_model",
    "version": "3",
    "command": "python train.py --data ${{inputs.data}} --out ${{outputs.model_output}}",
    "environment": "azureml:python:1",
    "inputs": {"data": {"type": "uri_folder"}, "lr": {"type": "number"}},
    "outputs": {"model_output": {"type": "mlflow_model"}},
}


def pipeline() -> dict[str, Any]:
    doc = {
        "type": "pipeline",
        "inputs": {"raw": {"type": "uri_folder", "path": "azureml://datastores/d/paths/raw"}},
        "outputs": {"scores": {"type": "uri_folder"}},
        "jobs": {
            "prep": {
                "command": "cp -r ${{inputs.src}} ${{outputs.clean}}",
                "compute": "local",
                "inputs": {"src": "${{parent.inputs.raw}}"},
                "outputs": {"clean": None},
            },
            "train": {
                "component": TRAIN,
                "display_name": "Train <b>it</b>",
                "inputs": {"data": "${{parent.jobs.prep.outputs.clean}}", "lr": 0.1},
            },
            "score": {
                "command": "score ${{inputs.model_input}} ${{inputs.again}} > ${{outputs.out}}/s",
                "compute": "local",
                "inputs": {
                    "model_input": "${{parent.jobs.train.outputs.model_output}}",
                    "again": "${{parent.jobs.train.inputs.data}}",  # followed to prep.clean
                },
                "outputs": {"out": "${{parent.outputs.scores}}"},
            },
        },
    }
    return PIPELINE.parse(doc, "p1")


def test_each_binding_is_an_edge_named_by_its_ports() -> None:
    found = graph(pipeline(), [])
    labels = [edge.label for edge in found.edges]
    assert labels == [
        "inputs.raw → prep.src",
        "prep.clean → train.data",
        "train.model_output → score.model_input",
        "prep.clean → score.again",
        "score.out → outputs.scores",
    ], labels
    first, last = found.edges[0], found.edges[-1]
    assert (first.source, first.target) == ((INPUT, "raw"), (STEP, "prep"))
    assert (last.source, last.target) == ((STEP, "score"), (OUTPUT, "scores"))
    assert found.inputs == ["raw"] and found.outputs == ["scores"]


def test_each_step_says_what_it_runs_is_given_and_makes() -> None:
    found = {s.step.key: s for s in graph(pipeline(), []).steps}
    assert [found[k].step.status for k in ("prep", "train", "score")] == ["NotStarted"] * 3
    train = found["train"]
    assert train.component == "train_model:3" and train.display_name == "Train <b>it</b>"
    assert train.inputs == {"data": "prep.clean", "lr": "0.1"}
    assert train.outputs == {"model_output": "mlflow_model"}
    assert found["prep"].component == "inline command" and found["prep"].display_name == "prep"
    assert found["score"].inputs == {"model_input": "train.model_output", "again": "prep.clean"}


def test_a_reused_step_names_the_job_it_reused_and_steps_carry_their_times() -> None:
    kids = [
        ChildView(
            "prep", "p1-prep", JobStatus.COMPLETED, reused_from="p0-prep", started_at=10.0, ended_at=10.0
        ),
        ChildView("train", "p1-train", JobStatus.RUNNING, started_at=11.0),
    ]
    found = {s.step.key: s for s in graph(pipeline(), kids).steps}
    assert found["prep"].step.reused_from == "p0-prep" and found["prep"].step.job == "p1-prep"
    assert found["train"].step.reused_from is None and found["train"].started_at == 11.0
    assert found["train"].step.status == "Running" and found["score"].step.job is None


def test_component_in_words() -> None:
    assert component_of({"component": "azureml:train:1"}) == "azureml:train:1"
    assert component_of({"component": {"type": "command", "command": "x"}}) == "inline command component"
    assert component_of({"type": "parallel"}) == "inline parallel"


def test_a_sweep_parameter_axis_is_categorical_for_a_choice_and_log_for_a_log_law() -> None:
    from cloudlet.studio.pages.job_graphs import _axis

    assert _axis("opt", {"type": "choice", "values": ["sgd", "adam"]}) == {
        "name": "opt",
        "kind": "category",
        "values": ["sgd", "adam"],
    }
    assert _axis("lr", {"type": "loguniform", "min_value": -6, "max_value": 0})["log"] is True
    assert _axis("drop", {"type": "uniform", "min_value": 0, "max_value": 1}) == {
        "name": "drop",
        "kind": "number",
        "log": False,
    }
