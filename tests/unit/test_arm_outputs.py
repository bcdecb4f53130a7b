"""The output ids and URIs azure-ai-ml's jobs.download reads (api/arm/wire/arm_outputs.py), and a batch
job's pipeline-shaped ARM view (api/arm/wire/arm_batch.scoring_job_to_arm)."""

from __future__ import annotations

import pytest

from cloudlet.api.arm.wire import arm_batch, arm_outputs
from cloudlet.domain.errors import CloudletError

WS_ID = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"


def test_run_outputs_name_data_outputs_by_an_id_that_resolves_back() -> None:
    outputs = {
        "model": {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/x/"},
        "table": {"type": "mltable", "path": "azureml://datastores/d/paths/t/"},
        "registered": {"type": "mlflow_model", "path": "azureml://datastores/d/paths/m/"},
    }
    refs = arm_outputs.run_outputs(outputs, "local", "w", "job_output_data_1")
    assert sorted(refs) == ["model", "table"]  # models are not data: the SDK asks another service
    assert refs["model"]["type"] == "uri_folder"
    # A job name holding the separator: every split is a candidate, the longest job name first.
    assert arm_outputs.candidates(refs["model"]["assetId"], "values[0]") == [
        ("job_output_data_1", "model"),
        ("job", "1_output_data_model"),
    ]
    tricky = arm_outputs.asset_id("local", "w", "a", "b_output_data_c")
    assert arm_outputs.candidates(tricky, "values[0]") == [("a_output_data_b", "c"), ("a", "b_output_data_c")]


@pytest.mark.parametrize(
    "value",
    sorted(
        [
            "azureml://datastores/workspaceblobstore/paths/x/",
            "azureml://locations/l/workspaces/w/data/someasset/versions/1",
            "azureml://locations/l/workspaces/w/data/azureml_j_output_data_o/versions/2",
        ]
    ),
)
def test_other_ids_are_refused_naming_the_field(value: str) -> None:
    with pytest.raises(CloudletError) as err:
        arm_outputs.candidates(value, "values[3]")
    assert err.value.status == 400 and err.value.target == "values[3]"


def test_long_uri_names_the_workspace() -> None:
    short = "azureml://datastores/workspaceblobstore/paths/azureml/j/score/"
    assert arm_outputs.long_uri(short, "s", "r", "w") == (
        "azureml://subscriptions/s/resourcegroups/r/workspaces/w/datastores/workspaceblobstore/paths/azureml/j/score/"
    )
    assert arm_outputs.long_uri("https://example.org/x", "s", "r", "w") == "https://example.org/x"


def test_a_batch_job_is_a_pipeline_shaped_batch_run() -> None:
    view = {
        "name": "bj",
        "type": "batch_scoring",
        "status": "Completed",
        "endpoint": "scorer",
        "deployment": "blue",
        "compute": "cpu",
        "tags": {"batch_endpoint": "scorer"},
        "inputs": {"data": {"type": "uri_folder", "path": "azureml:rows:1"}},
        "outputs": {
            "score": {"type": "uri_folder", "path": "azureml://datastores/d/paths/azureml/bj-score/score/"}
        },
    }
    arm = arm_batch.scoring_job_to_arm(view, WS_ID)
    props = arm["properties"]
    assert arm["id"] == f"{WS_ID}/jobs/bj" and props["jobType"] == "Pipeline" and props["jobs"] == {}
    assert props["tags"] == {"batch_endpoint": "scorer", "azureml.batchrun": "true"}
    assert props["computeId"] == f"{WS_ID}/computes/cpu"
    assert props["inputs"]["data"] == {"jobInputType": "uri_folder", "uri": "azureml:rows:1"}
    assert props["outputs"]["score"]["uri"].endswith("/bj-score/score/")
    assert "default" not in props["outputs"]  # else the SDK's stream lists logs from blob storage
