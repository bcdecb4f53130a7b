"""api/arm/wire/arm_pipeline_jobs.py on the bodies azure-ai-ml 1.35.2 sends (tests/data/arm_pipeline_jobs/):
a ``@dsl.pipeline`` of two command components and a ``command(...).sweep(...)`` become documents
that the pipeline and sweep kinds accept; their views go back in the ARM shape; errors name the
ARM field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cloudlet.api.arm.wire import arm_jobs
from cloudlet.api.arm.wire import arm_pipeline_jobs as arm
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.pipeline_jobs import PIPELINE
from cloudlet.domain.jobs.sweep_jobs import parse_sweep

DATA = Path(__file__).parents[1] / "data" / "arm_pipeline_jobs"
WS = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"
CODE = "codes/" + "a" * 64


def body(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return loaded


def refs() -> arm_jobs.Refs:
    return arm_jobs.Refs(code=lambda code_id: CODE)


def test_the_sdk_pipeline_becomes_a_pipeline_document() -> None:
    doc = arm.pipeline_from_arm(body("pipeline"), "p1")
    assert (
        doc["display_name"] == "two-steps" and doc["experiment_name"] == "pipes" and doc["tags"] == {"k": "v"}
    )
    assert doc["inputs"] == {
        "raw": {
            "type": "uri_folder",
            "path": "azureml://datastores/workspaceblobstore/paths/LocalUpload/h/data/",
        },
        "epochs": "4",
    }
    assert doc["outputs"] == {"model": {"type": "uri_folder"}}
    assert doc["settings"] == {
        "default_compute": "azureml:cpu-cluster",
        "continue_on_step_failure": True,
        "force_rerun": True,
    }
    first, second = doc["jobs"]["first"], doc["jobs"]["second"]
    assert first["component"] == "azureml:azureml_anonymous:firsthash"  # the anonymous component
    assert first["inputs"] == {"raw": "${{parent.inputs.raw}}"}
    assert first["outputs"] == {"prepped": {"type": "uri_folder"}}
    assert second["compute"] == "azureml:gpu-cluster" and second["display_name"] == "train"
    assert second["inputs"] == {
        "data": "${{parent.jobs.first.outputs.prepped}}",
        "epochs": "${{parent.inputs.epochs}}",
    }
    assert second["outputs"] == {"model": "${{parent.outputs.model}}"}
    parsed = PIPELINE.parse(doc, "p1")  # the pipeline kind takes it (components resolved later)
    assert parsed["settings"]["default_compute"] == "cpu-cluster" and list(parsed["jobs"]) == [
        "first",
        "second",
    ]


def test_camel_case_steps_are_accepted_too() -> None:
    raw = body("pipeline")
    step = raw["properties"]["jobs"]["first"]
    step["inputs"]["raw"] = {"jobInputType": "literal", "value": "${{parent.inputs.raw}}"}
    step["outputs"]["prepped"] = {"jobOutputType": "uri_folder", "mode": "Upload"}
    doc = arm.pipeline_from_arm(raw, "p1")
    assert doc["jobs"]["first"]["inputs"] == {"raw": "${{parent.inputs.raw}}"}
    assert doc["jobs"]["first"]["outputs"] == {"prepped": {"type": "uri_folder", "mode": "upload"}}


@pytest.mark.parametrize(
    ("component", "reference"),
    [
        (f"{WS}/components/train/versions/2", "azureml:train:2"),
        (f"azureml:{WS}/components/train/labels/latest", "azureml:train@latest"),
        ("azureml:train:3", "azureml:train:3"),
    ],
)
def test_component_ids_become_references(component: str, reference: str) -> None:
    assert arm.component_reference(component) == reference


def test_pipeline_errors_name_the_arm_field() -> None:
    raw = body("pipeline")
    del raw["properties"]["jobs"]["first"]["componentId"]
    with pytest.raises(CloudletError) as missing:
        arm.pipeline_from_arm(raw, "p1")
    assert missing.value.target == "properties.jobs.first.componentId"
    raw = body("pipeline")
    raw["properties"]["jobs"]["second"]["type"] = "spark"
    with pytest.raises(CloudletError) as kind:
        arm.pipeline_from_arm(raw, "p1")
    assert kind.value.target == "properties.jobs.second.type" and "command" in kind.value.message


def test_the_sdk_sweep_becomes_a_sweep_document() -> None:
    doc = arm.sweep_from_arm(body("sweep"), "s1", refs())
    assert doc["trial"] == {
        "command": "python train.py --lr ${{search_space.lr}} --depth ${{search_space.depth}}",
        "code": CODE,
        "environment": "azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
    }
    assert doc["search_space"] == {
        "lr": {"type": "uniform", "min_value": 0.01, "max_value": 0.1},
        "depth": {"type": "choice", "values": [2, 4]},
    }
    assert doc["sampling_algorithm"] == {"type": "random"} and doc["compute"] == "azureml:cpu-cluster"
    assert doc["objective"] == {"goal": "maximize", "primary_metric": "accuracy"}
    assert doc["early_termination"] == {
        "type": "Bandit",
        "evaluation_interval": 1,
        "delay_evaluation": 0,
        "slack_factor": 0.2,
    }
    assert doc["limits"] == {"max_total_trials": 3, "max_concurrent_trials": 2, "timeout": 3600}
    parsed = parse_sweep(doc, "s1")
    assert parsed["early_termination"]["type"] == "bandit" and parsed["compute"] == "cpu-cluster"


@pytest.mark.parametrize(
    ("rest", "expr"),
    [
        (["randint", [5]], {"type": "randint", "upper": 5}),
        (["quniform", [0, 1, 0.1]], {"type": "quniform", "min_value": 0, "max_value": 1, "q": 0.1}),
        (["lognormal", [0, 1]], {"type": "lognormal", "mu": 0, "sigma": 1}),
        (["choice", [["a", "b"]]], {"type": "choice", "values": ["a", "b"]}),
    ],
)
def test_rest_search_spaces_round_trip(rest: list[Any], expr: dict[str, Any]) -> None:
    assert arm._space("x", rest) == expr
    assert arm._arm_space(expr) == (["choice", [expr["values"]]] if expr["type"] == "choice" else rest)


def test_a_bad_search_space_names_its_field() -> None:
    raw = body("sweep")
    raw["properties"]["searchSpace"]["lr"] = ["uniform", [0.1]]
    with pytest.raises(CloudletError) as caught:
        arm.sweep_from_arm(raw, "s1", refs())
    assert caught.value.target == "properties.searchSpace.lr" and "min_value" in caught.value.message


STUDIO = {
    "Studio": {"endpoint": "http://h:1/studio/ws/s/r/w/jobs/p1?tab=overview", "job_service_type": "Studio"}
}
STUDIO_REST = {"Studio": {"endpoint": STUDIO["Studio"]["endpoint"], "jobServiceType": "Studio"}}


def test_views_go_back_in_the_arm_shape() -> None:
    doc = PIPELINE.parse(arm.pipeline_from_arm(body("pipeline"), "p1"), "p1")
    doc["jobs"]["first"]["component"] = {
        "name": "azureml_anonymous",
        "version": "firsthash",
        "type": "command",
    }
    view = {**doc, "status": "Running", "creation_context": {"created_by": "u", "created_at": "t"}}
    view["services"] = STUDIO
    out = arm.pipeline_to_arm(view, WS)
    props = out["properties"]
    assert out["id"] == f"{WS}/jobs/p1" and props["jobType"] == "Pipeline" and props["status"] == "Running"
    assert props["settings"]["default_compute"] == f"{WS}/computes/cpu-cluster"
    first = props["jobs"]["first"]
    assert first["componentId"] == f"{WS}/components/azureml_anonymous/versions/firsthash"
    assert first["inputs"]["raw"] == {"job_input_type": "literal", "value": "${{parent.inputs.raw}}"}
    assert props["jobs"]["second"]["outputs"]["model"] == {
        "type": "literal",
        "value": "${{parent.outputs.model}}",
    }
    assert props["jobs"]["second"]["computeId"] == f"{WS}/computes/gpu-cluster"
    assert "default" not in props["outputs"]  # else the SDK streams logs from blob storage
    assert props["services"] == STUDIO_REST  # what the SDK's studio_url reads

    sweep = parse_sweep(arm.sweep_from_arm(body("sweep"), "s1", refs()), "s1")
    props = arm.sweep_to_arm({**sweep, "name": "s1", "status": "Completed", "services": STUDIO}, WS)
    props = props["properties"]
    assert props["jobType"] == "Sweep" and props["computeId"] == f"{WS}/computes/cpu-cluster"
    assert props["services"] == STUDIO_REST
    assert props["searchSpace"] == body("sweep")["properties"]["searchSpace"]
    assert props["samplingAlgorithm"] == {"samplingAlgorithmType": "Random"}
    assert props["earlyTermination"]["policyType"] == "Bandit"
    assert props["limits"] == {
        "jobLimitsType": "Sweep",
        "maxTotalTrials": 3,
        "maxConcurrentTrials": 2,
        "timeout": "PT1H",
    }


def test_a_childs_run_view_and_the_execution_log() -> None:
    child = {
        "name": "p1-first",
        "parent": "p1",
        "display_name": "prep",
        "status": "Completed",
        "created": "2026-01-01T00:00:00Z",
        "started": "2026-01-01T00:00:01Z",
        "ended": "2026-01-01T00:00:05Z",
        "compute": "cpu-cluster",
    }
    run = arm.run_view(child)
    assert run["runId"] == "p1-first" and run["parentRunId"] == "p1" and run["displayName"] == "prep"
    assert run["compute"] == {"target": "cpu-cluster"} and run["lastModifiedUtc"] == child["ended"]
    steps = [
        {**child, "key": "first"},
        {"key": "second", "name": "p1-second", "status": "Running", "started": "2026-01-01T00:00:06Z"},
    ]
    running = arm.execution_log("p1", steps, "Running").splitlines()
    assert running == [
        "[steps] p1 submitted",
        "[2026-01-01T00:00:01Z] step first (p1-first) started",
        "[2026-01-01T00:00:05Z] step first (p1-first) Completed",
        "[2026-01-01T00:00:06Z] step second (p1-second) started",
    ]
    assert arm.execution_log("s1", [], "Failed", "trial").splitlines() == [
        "[trials] s1 submitted",
        "[trials] s1 Failed",
    ]


def test_an_inline_step_names_the_anonymous_component_of_its_content() -> None:
    """A native YAML's inline command step has no registered component; the SDK cannot build a
    ``PipelineJob`` (``jobs.get``/``list``) from a step without ``componentId``."""
    step = {"type": "command", "command": "python train.py", "environment": "azureml:env:1", "compute": "c1"}
    view = {"name": "p2", "status": "Queued", "jobs": {"train": step, "same": {**step, "compute": "c2"}}}
    again = arm.pipeline_to_arm(view, WS)["properties"]["jobs"]
    jobs = arm.pipeline_to_arm(view, WS)["properties"]["jobs"]
    prefix = f"{WS}/components/azureml_anonymous/versions/"
    assert jobs["train"]["componentId"].startswith(prefix)
    assert jobs["train"]["componentId"] == again["train"]["componentId"]  # stable across reads
    assert jobs["same"]["componentId"] == jobs["train"]["componentId"]  # the compute is a binding
    other = {**view, "jobs": {"train": {**step, "command": "python other.py"}}}
    assert (
        arm.pipeline_to_arm(other, WS)["properties"]["jobs"]["train"]["componentId"]
        != jobs["train"]["componentId"]
    )
