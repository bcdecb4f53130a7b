"""Batch endpoints (pure): the documents, the scoring job an invocation makes, the batch_scoring
kind's decisions, and the driver's splitting and row rendering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cloudlet.api.arm.wire import arm_batch
from cloudlet.domain.endpoints import batch_endpoints as rules
from cloudlet.domain.endpoints import batch_scoring
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import job_spec
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView, ParentContext
from cloudlet.nodekit import batch_driver
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import batch_endpoints as service
from cloudlet.store.schema import BatchDeployment, BatchEndpoint

DEPLOYMENT: dict[str, Any] = {
    "name": "blue",
    "endpoint_name": "scorer",
    "model": "azureml:m:1",
    "code_configuration": {"code": "codes/" + "a" * 64, "scoring_script": "score.py"},
    "compute": "azureml:cpu",
    "mini_batch_size": 2,
    "retry_settings": {"max_retries": 1},
    "output_action": "SummaryOnly",
    "instance_count": 2,
}


def test_deployment_defaults_and_spellings() -> None:
    doc = rules.parse_deployment(DEPLOYMENT, "scorer", "blue")
    assert doc["compute"] == "cpu" and doc["output_action"] == "summary_only"
    assert doc["resources"] == {"instance_count": 2} and "instance_count" not in doc
    assert doc["retry_settings"] == {"max_retries": 1, "timeout": 30}
    assert doc["output_file_name"] == "predictions.csv" and doc["error_threshold"] == -1


@pytest.mark.parametrize(
    ("change", "target"),
    [
        ({"mini_batch_size": 0}, "mini_batch_size"),
        (
            {"code_configuration": {"code": "x", "scoring_script": "../s.py"}},
            "code_configuration.scoring_script",
        ),
        ({"output_action": "append"}, "output_action"),
        ({"compute": None}, "compute"),
        ({"retry_settings": {"max_retries": -1}}, "retry_settings.max_retries"),
    ],
)
def test_deployment_refusals_name_the_field(change: dict[str, Any], target: str) -> None:
    with pytest.raises(CloudletError) as caught:
        rules.parse_deployment({**DEPLOYMENT, **change})
    assert caught.value.target == target


def test_path_names_win_and_must_agree() -> None:
    assert rules.parse_endpoint({}, "scorer")["name"] == "scorer"
    with pytest.raises(CloudletError, match="differs"):
        rules.parse_endpoint({"name": "other"}, "scorer")


def test_deployment_for_default_and_named() -> None:
    endpoint = {"name": "scorer", "defaults": {"deployment_name": "blue"}}
    assert rules.deployment_for(endpoint, None, ["blue", "green"]) == "blue"
    assert rules.deployment_for(endpoint, "green", ["blue", "green"]) == "green"
    with pytest.raises(CloudletError) as caught:
        rules.deployment_for(endpoint, "red", ["blue"])
    assert caught.value.status == 404
    with pytest.raises(CloudletError, match="--deployment-name"):
        rules.deployment_for({"name": "scorer"}, None, ["blue"])


def test_scoring_job_child_is_a_valid_command_job_with_output_score() -> None:
    deployment = rules.parse_deployment(DEPLOYMENT, "scorer", "blue")
    data = rules.input_of(rules.parse_invoke({"input": "azureml:rows:1"}))
    doc = rules.scoring_job("scorer", deployment, data, "codes/" + "b" * 64, "job1")
    child = job_spec.parse_job(doc["child"], "job1-score")
    assert child.compute == "cpu" and child.code == "codes/" + "b" * 64
    assert set(child.outputs) == {"score"} and child.outputs["score"].path == doc["outputs"]["score"]["path"]
    assert child.inputs["model"].type == "custom_model"  # type: ignore[union-attr]
    command = child.command
    assert command.startswith(f"python {rules.DRIVER_FILE} --input ${{{{inputs.data}}}}")
    assert "--mini-batch-size 2" in command and "--output-action summary_only" in command
    assert "--max-retries 1" in command and "--model-dir ${{inputs.model}}" in command


def _view(status: JobStatus, exit_code: int | None = None) -> ChildView:
    return ChildView(key="score", name="job1-score", status=status, error="exit", exit_code=exit_code)


def test_batch_scoring_kind_submits_follows_and_settles() -> None:
    deployment = rules.parse_deployment(DEPLOYMENT, "scorer", "blue")
    doc = rules.scoring_job(
        "scorer", deployment, {"type": "uri_folder", "path": "azureml:rows:1"}, "codes/x", "j"
    )
    ctx = ParentContext(now=1.0, started_at=0.0)
    first = batch_scoring.advance(doc, [], ctx)
    assert [c.key for c in first.submit] == ["score"] and first.outcome is None
    assert batch_scoring.advance(doc, [_view(JobStatus.RUNNING)], ctx).outcome is None
    assert batch_scoring.advance(doc, [_view(JobStatus.COMPLETED)], ctx).outcome is JobStatus.COMPLETED
    over = batch_scoring.advance(doc, [_view(JobStatus.FAILED, rules.THRESHOLD_EXIT)], ctx)
    assert over.outcome is JobStatus.FAILED and "error_threshold" in (over.message or "")
    plain = batch_scoring.advance(doc, [_view(JobStatus.FAILED, 1)], ctx)
    assert plain.outcome is JobStatus.FAILED and "error_threshold" not in (plain.message or "")
    canceled = batch_scoring.advance(doc, [_view(JobStatus.RUNNING)], ParentContext(1.0, 0.0, True))
    assert canceled.outcome is JobStatus.CANCELED


def test_driver_splits_and_renders_rows() -> None:
    assert batch_driver.mini_batches(["a", "b", "c"], 2) == [["a", "b"], ["c"]]
    assert batch_driver._rows(["x", (1, 2), [3, "y"]]) == ["x", "1 2", "3 y"]
    assert batch_driver._rows(None) == []
    assert rules.THRESHOLD_EXIT == batch_driver.THRESHOLD_EXIT


def test_todays_shape_settings_and_an_inline_model() -> None:
    """``type: model`` with ``settings:`` (Azure's current modelBatchDeployment YAML) is stored flat;
    an inline ``model: {name, path, type}`` keeps its path and its type."""
    doc = {
        "name": "mnist-torch-dpl",
        "endpoint_name": "mnist-batch",
        "type": "model",
        "model": {
            "name": "mnist-classifier-torch",
            "path": "azureml://datastores/d/paths/LocalUpload/h/model",
        },
        "code_configuration": {"code": "codes/" + "a" * 64, "scoring_script": "batch_driver.py"},
        "compute": "azureml:batch-cluster",
        "resources": {"instance_count": 1},
        "settings": {
            "max_concurrency_per_instance": 2,
            "mini_batch_size": 10,
            "output_action": "append_row",
            "retry_settings": {"max_retries": 3, "timeout": 30},
            "error_threshold": -1,
            "logging_level": "info",
        },
    }
    stored = rules.parse_deployment(doc)
    assert "settings" not in stored and stored["mini_batch_size"] == 10
    assert stored["max_concurrency_per_instance"] == 2 and stored["retry_settings"]["max_retries"] == 3
    assert stored["model"].endswith("/model") and stored["model_type"] == "custom_model"
    with pytest.raises(CloudletError) as twice:
        rules.parse_deployment({**doc, "mini_batch_size": 5})
    assert twice.value.target == "settings.mini_batch_size"
    with pytest.raises(CloudletError) as unknown:
        rules.parse_deployment({**doc, "settings": {"default_compute": "c"}})
    assert unknown.value.target == "settings.default_compute"
    no_code = {k: v for k, v in doc.items() if k != "code_configuration"}
    no_code["model"] = {**doc["model"], "type": "mlflow_model"}
    stored = rules.parse_deployment(no_code)
    assert stored["model_type"] == "mlflow_model" and "code_configuration" not in stored
    assert "--scoring-script _cloudlet_mlflow_score.py" in rules.driver_command(stored)


def test_the_driver_lays_the_model_out_under_its_folder_name(tmp_path: Any) -> None:
    model = tmp_path / "LocalUpload" / "h" / "model"
    model.mkdir(parents=True)
    (model / "model.pt").write_text("w")
    root = batch_driver.model_root(str(model) + "/")
    assert (Path(root) / "model" / "model.pt").read_text() == "w"


def test_an_arm_invocation_carries_az_mls_overrides() -> None:
    """What ``az ml batch-endpoint invoke --output-path --instance-count --set`` sends through the
    SDK: the output as a ``UriFile`` (the file name in its uri) and the instances under compute."""
    props = {
        "inputData": {"UriFolder": {"jobInputType": "UriFolder", "uri": "azureml:rows:1"}},
        "outputData": {
            "output_name": {"jobOutputType": "UriFile", "uri": "azureml://datastores/d/paths/out/p.csv"}
        },
        "compute": {"instanceCount": 5},
        "miniBatchSize": 20,
        "retrySettings": {"maxRetries": 1, "timeout": "PT1M"},
    }
    request = rules.parse_invoke(arm_batch.invocation_from_arm({"properties": props}))
    assert (request.output_path, request.output_file_name) == ("azureml://datastores/d/paths/out/", "p.csv")
    assert (request.instance_count, request.mini_batch_size) == (5, 20)
    assert request.retry_settings is not None and request.retry_settings.timeout == 60
    dataset = {"datastoreId": "/subscriptions/s/resourceGroups/r/workspaces/w/datastores/d2", "path": "x/y"}
    props = {"inputData": props["inputData"], "outputDataset": dataset}
    assert (
        arm_batch.invocation_from_arm({"properties": props})["output_path"]
        == "azureml://datastores/d2/paths/x/y"
    )
    assert arm_batch.invocation_target("mini_batch_size") == "properties.miniBatchSize"
    assert arm_batch.invocation_target("retry_settings.timeout") == "properties.retrySettings"


def test_an_output_path_is_a_datastore_folder_in_short_form() -> None:
    long = "azureml://subscriptions/s/resourcegroups/r/workspaces/w/datastores/d/paths/a//./b"
    assert (
        rules.parse_invoke({"input": "x", "output_path": long}).output_path
        == "azureml://datastores/d/paths/a/b/"
    )
    for bad in ("azureml://datastores/d/paths/", "azureml://datastores/d/paths/a/../../x", "https://h/x"):
        with pytest.raises(CloudletError) as caught:
            rules.parse_invoke({"input": "x", "output_path": bad})
        assert caught.value.target == "output_path", bad


def test_both_doors_render_one_view_of_an_endpoint_and_a_deployment() -> None:
    # Issue 26 item 2: the ARM facade translates the service's view (transient rows, no store).
    ref = WorkspaceRef("00000000-0000-0000-0000-000000000000", "default", "default")
    spec = rules.parse_endpoint({"description": "d", "defaults": {"deployment_name": "blue"}}, "scorer")
    endpoint = BatchEndpoint(name="scorer", spec=spec, created_by="me", created_at=0.0, modified_at=0.0)
    view = service.render_endpoint(endpoint, ref, "https://h:1")
    assert view["scoring_uri"] == f"https://h:1{ref.arm_id}/batchEndpoints/scorer/invoke"
    body = arm_batch.endpoint_to_arm(view, ref.arm_id, "local")
    assert body["id"] == view["id"] and body["name"] == "scorer"
    assert body["properties"]["scoringUri"] == view["scoring_uri"]
    assert body["properties"]["defaults"] == {"deploymentName": "blue"}
    deployment = BatchDeployment(
        name="blue",
        spec=rules.parse_deployment(DEPLOYMENT, "scorer", "blue"),
        created_by="me",
        created_at=0.0,
        modified_at=0.0,
    )
    shown = service.render_deployment(deployment, "scorer", ref)
    assert shown["id"] == f"{ref.arm_id}/batchEndpoints/scorer/deployments/blue"
    arm = arm_batch.deployment_to_arm(shown, ref.arm_id, "scorer", None, "local")
    assert arm["id"] == shown["id"] and arm["properties"]["miniBatchSize"] == 2
