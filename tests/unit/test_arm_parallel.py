"""api/arm/wire/arm_parallel.py and the parallel component (domain.jobs.pipeline_parallel) on the
shape azure-ai-ml 1.35.2 sends for ``parallel_run_function`` in a ``@dsl.pipeline``: the node
becomes a ``type: parallel`` step the pipeline kind accepts and runs as the batch driver, its view
goes back as a node the SDK loads; the parallel component it registered first is checked as such a
step; errors name the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cloudlet.api.arm.wire import arm_jobs, arm_parallel
from cloudlet.api.arm.wire import arm_pipeline_jobs as arm
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import pipeline_parallel
from cloudlet.domain.jobs.pipeline_bindings import default_output_path
from cloudlet.domain.jobs.pipeline_dag import child_doc
from cloudlet.domain.jobs.pipeline_jobs import PIPELINE

WS = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"
CODE = "codes/" + "a" * 64
CODE_ID = f"azureml:{WS}/codes/c1/versions/1"
COMPONENT_ID = f"{WS}/components/azureml_anonymous/versions/0f3a"
ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"

# Parallel._to_rest_object of azure-ai-ml 1.35.2 after jobs.create_or_update resolved the node
# (its component registered, the task's code uploaded): the fields as the SDK sends them.
NODE: dict[str, Any] = {
    "type": "parallel",
    "name": "batch_score",
    "display_name": "Batch score",
    "resources": {"instance_count": 2},
    "error_threshold": -1,
    "mini_batch_error_threshold": 5,
    "environment_variables": {"X": "1"},
    "max_concurrency_per_instance": 1,
    "task": {
        "type": "run_function",
        "code": CODE_ID,
        "entry_script": "score.py",
        "program_arguments": "--tag ${{inputs.tag}}",
        "append_row_to": "${{outputs.job_output_file}}",
        "environment": ENV,
    },
    "input_data": "${{inputs.job_data_path}}",
    "inputs": {
        "job_data_path": {"value": "${{parent.inputs.data}}", "job_input_type": "literal"},
        "tag": {"value": "hello", "job_input_type": "literal"},
    },
    "outputs": {
        "job_output_path": {"job_output_type": "uri_folder"},
        "job_output_file": {"value": "${{parent.outputs.out}}", "type": "literal"},
    },
    "_source": "BUILDER",
    "componentId": COMPONENT_ID,
    "retry_settings": {"timeout": 60, "max_retries": 2},
    "logging_level": "DEBUG",
    "mini_batch_size": 2,
    "partition_keys": None,
    "identity": None,
}


def body(node: dict[str, Any]) -> dict[str, Any]:
    return {
        "properties": {
            "jobType": "Pipeline",
            "inputs": {"data": {"uri": "azureml://datastores/d/paths/in/", "jobInputType": "uri_folder"}},
            "outputs": {"out": {"jobOutputType": "uri_file"}},
            "settings": {"default_compute": "cpu-cluster"},
            "jobs": {"batch_score": node},
        }
    }


def refs() -> arm_jobs.Refs:
    return arm_jobs.Refs(code=lambda code_id: CODE if code_id == CODE_ID.removeprefix("azureml:") else "?")


def test_the_sdk_parallel_node_becomes_a_parallel_step_that_runs_the_driver() -> None:
    doc = PIPELINE.parse(arm.pipeline_from_arm(body(NODE), "p1", refs()), "p1")
    step = doc["jobs"]["batch_score"]
    assert step["type"] == "parallel" and step["component_id"] == COMPONENT_ID
    assert step["task"] == {
        "type": "run_function",
        "code": CODE,
        "entry_script": "score.py",
        "program_arguments": "--tag ${{inputs.tag}}",
        "append_row_to": "${{outputs.job_output_file}}",
        "environment": ENV,
    }
    assert (step["mini_batch_size"], step["logging_level"], step["mini_batch_error_threshold"]) == (
        2,
        "debug",
        5,
    )
    assert step["retry_settings"] == {"max_retries": 2, "timeout": 60}
    assert (
        step["inputs"]["tag"] == "hello" and step["outputs"]["job_output_file"] == "${{parent.outputs.out}}"
    )
    job = child_doc(doc, "batch_score", {})
    assert job["command"].startswith("python ") and "--mini-batch-size 2" in job["command"]
    assert "--append-row-to ${{outputs.job_output_file}}" in job["command"]
    assert job["code"] == CODE and job["environment"] == ENV


def test_the_view_goes_back_as_a_node_the_sdk_loads() -> None:
    doc = PIPELINE.parse(arm.pipeline_from_arm(body(NODE), "p1", refs()), "p1")
    view = {**doc, "name": "p1", "status": "Completed", "created": "2026-12-07T00:00:00Z"}
    node = arm.pipeline_to_arm(view, WS)["properties"]["jobs"]["batch_score"]
    assert node["type"] == "parallel" and node["componentId"] == COMPONENT_ID  # the SDK needs it
    assert node["logging_level"] == "DEBUG"  # its schema's spelling
    assert node["task"]["entry_script"] == "score.py" and node["input_data"] == "${{inputs.job_data_path}}"
    assert node["inputs"]["tag"] == {"job_input_type": "literal", "value": "hello"}


@pytest.mark.parametrize(
    ("change", "target"),
    [
        (lambda n: n["task"].pop("entry_script"), "jobs.batch_score.task.entry_script"),
        (lambda n: n.pop("task"), "properties.jobs.batch_score.task"),
        (lambda n: n.update(mini_batch_size="10kb"), "jobs.batch_score.mini_batch_size"),
        (lambda n: n.update(partition_keys='["a"]'), "jobs.batch_score.partition_keys"),
        (lambda n: n.update(input_data="${{inputs.nope}}"), "jobs.batch_score.input_data"),
    ],
)
def test_a_bad_node_is_refused_naming_the_field(change: Any, target: str) -> None:
    node = copy.deepcopy(NODE)
    change(node)
    with pytest.raises(CloudletError) as caught:
        PIPELINE.parse(arm.pipeline_from_arm(body(node), "p1", refs()), "p1")
    assert caught.value.target == target, caught.value


def test_a_code_id_the_store_does_not_know_names_the_nodes_task_code() -> None:
    def unknown(code_id: str) -> str:
        raise CloudletError("ValidationError", f"code {code_id!r} was not found", "properties.codeId")

    with pytest.raises(CloudletError) as caught:
        arm.pipeline_from_arm(body(NODE), "p1", arm_jobs.Refs(code=unknown))
    assert caught.value.target == "properties.jobs.batch_score.task.code", caught.value


def test_only_a_node_with_an_arm_code_id_needs_the_store() -> None:
    assert arm_parallel.has_task_code(body(NODE))
    assert not arm_parallel.has_task_code(body({**NODE, "task": {**NODE["task"], "code": CODE}}))


# The componentSpec the SDK registers first (azureml_anonymous), as arm_components.from_arm passes it.
COMPONENT: dict[str, Any] = {
    "name": "azureml_anonymous",
    "version": "0f3a",
    "display_name": "batch_score",
    "type": "parallel",
    "inputs": {"job_data_path": {"type": "uri_folder"}, "tag": {"type": "string", "default": "x"}},
    "outputs": {"job_output_file": {"type": "uri_file"}},
    "resources": {"instance_count": 2},
    "error_threshold": -1,
    "input_data": "${{inputs.job_data_path}}",
    "is_deterministic": True,
    "logging_level": "DEBUG",
    "max_concurrency_per_instance": 1,
    "mini_batch_error_threshold": 5,
    "mini_batch_size": "2",
    "retry_settings": {"timeout": 60, "max_retries": 2},
    "task": {"type": "run_function", "code": CODE_ID, "entry_script": "score.py", "environment": ENV},
}


def test_the_parallel_component_is_checked_as_the_step_it_describes() -> None:
    name, version, stored = pipeline_parallel.registered_component(copy.deepcopy(COMPONENT), None, "0f3a")
    assert (name, version) == ("azureml_anonymous", "0f3a")
    assert stored["type"] == "parallel" and stored["mini_batch_size"] == 2 and stored["is_deterministic"]
    spec = arm_parallel.component_spec(stored)  # read back as the SDK's ParallelComponent schema wants
    assert (spec["mini_batch_size"], spec["logging_level"]) == ("2", "DEBUG")
    bad = copy.deepcopy(COMPONENT)
    del bad["task"]["entry_script"]
    with pytest.raises(CloudletError) as caught:
        pipeline_parallel.registered_component(bad, None, "0f3a")
    assert caught.value.target == "task.entry_script", caught.value


def test_a_uri_file_output_with_no_path_is_a_file_not_a_folder() -> None:
    assert default_output_path("d", "j", "rows", "uri_file") == "azureml://datastores/d/paths/azureml/j/rows"
    assert default_output_path("d", "j", "model") == "azureml://datastores/d/paths/azureml/j/model/"


def test_an_mltable_parallel_component_is_refused_naming_its_input_type() -> None:
    """The iris sample's shape (tabular mini-batches): not built, refused when the SDK registers it."""
    tabular = copy.deepcopy(COMPONENT)
    tabular["inputs"]["job_data_path"] = {"type": "mltable"}
    tabular["mini_batch_size"] = "10kb"
    with pytest.raises(CloudletError) as caught:
        pipeline_parallel.registered_component(tabular, None, "0f3a")
    assert caught.value.target == "inputs.job_data_path.type", caught.value
    assert "mltable" in caught.value.message
