"""Pipeline-component batch deployments (domain.endpoints.batch_pipelines): parsing and the invocation's
job."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.domain.endpoints import batch_pipelines as rules
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.pipeline_jobs import PIPELINE

COMPONENT: dict[str, Any] = {
    "type": "pipeline",
    "inputs": {"input_data": {"type": "uri_folder"}, "score_mode": {"type": "string", "default": "append"}},
    "outputs": {"scores": {"type": "uri_folder", "mode": "upload"}},
    "jobs": {
        "score": {
            "command": "ls ${{inputs.d}} ${{inputs.m}} > ${{outputs.s}}/out.txt",
            "inputs": {"d": "${{parent.inputs.input_data}}", "m": "${{parent.inputs.score_mode}}"},
            "outputs": {"s": "${{parent.outputs.scores}}"},
        }
    },
}
DEPLOYMENT = {"type": "pipeline", "component": COMPONENT, "settings": {"default_compute": "batch-cluster"}}
DATA = {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/LocalUpload/x/data"}


def test_an_invocation_runs_the_component_as_a_pipeline_with_its_input() -> None:
    spec = rules.parse_deployment(DEPLOYMENT, "ep-one", "dep")
    assert rules.compute_of(spec) == "batch-cluster" and not rules.needs_component(spec)
    job = rules.invocation_job(spec, DATA, "batchjob-1")
    assert job["inputs"] == {"input_data": DATA, "score_mode": "append"}
    assert job["tags"] == {"batch_endpoint": "ep-one", "batch_deployment": "dep"}
    assert job["settings"]["default_compute"] == "batch-cluster"
    parsed = PIPELINE.parse(job, "batchjob-1")
    assert parsed["outputs"]["scores"]["mode"] == "upload" and list(parsed["jobs"]) == ["score"]


def test_a_registered_component_waits_for_the_service() -> None:
    spec = rules.parse_deployment({**DEPLOYMENT, "component": "azureml:hello_batch@latest"}, "ep-one", "dep")
    assert rules.needs_component(spec) and spec["component"] == "azureml:hello_batch@latest"


@pytest.mark.parametrize(
    ("change", "target"),
    [
        ({"settings": {}}, "settings.default_compute"),
        ({"settings": {"default_compute": "c", "bogus": 1}}, "settings.bogus"),
        ({"model": "azureml:m:1"}, "model"),
        ({"component": 3}, "component"),
        (
            {"component": {**COMPONENT, "jobs": {"a": {"command": "echo ${{inputs.x}}"}}}},
            "component.jobs.a.command",
        ),
        ({"name": "other"}, "name"),
    ],
)
def test_bad_pipeline_deployments_are_refused_naming_the_field(change: dict[str, Any], target: str) -> None:
    with pytest.raises(CloudletError) as info:
        rules.parse_deployment({**DEPLOYMENT, **change}, "ep-one", "dep")
    assert info.value.target == target, info.value


def test_a_component_with_two_data_inputs_is_refused() -> None:
    two = {**COMPONENT, "inputs": {**COMPONENT["inputs"], "more": {"type": "uri_file"}}}
    with pytest.raises(CloudletError) as info:
        rules.parse_deployment({**DEPLOYMENT, "component": two}, "ep-one", "dep")
    assert info.value.target == "component.inputs" and "one data input" in info.value.message
