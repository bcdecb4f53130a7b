"""Command jobs between the ARM shape azure-ai-ml sends (bodies recorded from the SDK in
tests/data/arm_jobs/) and cloudlet's job document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cloudlet.api.arm.wire.arm_jobs import Refs, arm_name, from_arm, iso_seconds, seconds_iso, to_arm
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs import queue_settings
from cloudlet.domain.jobs.job_spec import job_to_doc, parse_job

DATA = Path(__file__).parents[1] / "data" / "arm_jobs"
WS = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"


def recorded(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return body


def code_ref(arm_id: str) -> str:
    named = arm_name(arm_id, "codes")
    assert named is not None
    return f"codes/{'0' * 63}{named[1]}"


REFS = Refs(code=code_ref)


def test_the_sdks_command_job_becomes_a_job_document() -> None:
    doc = from_arm(recorded("command_full"), "job-1", REFS)
    assert doc["command"].startswith("python train.py --data ${{inputs.data}}")
    assert doc["code"] == "codes/" + "0" * 63 + "1"
    assert doc["environment"] == "azureml:env:1"
    assert doc["compute"] == "cpu-cluster"
    assert doc["display_name"] == "train" and doc["experiment_name"] == "exp"
    assert doc["inputs"]["data"] == {
        "type": "uri_folder",
        "path": "azureml://datastores/workspaceblobstore/paths/LocalUpload/abc/data/",
    }
    assert doc["inputs"]["lr"] == "0.01" and doc["inputs"]["flag"] == "True"
    assert doc["inputs"]["m"] == {"type": "mlflow_model", "path": "azureml:mymodel:1"}
    assert doc["inputs"]["f"]["mode"] == "download"
    assert doc["outputs"]["reg"] == {"type": "mlflow_model", "name": "my-model"}
    assert doc["distribution"] == {"type": "pytorch", "process_count_per_instance": 2}
    assert doc["resources"] == {"instance_count": 2, "shm_size": "2g"}
    assert doc["limits"] == {"timeout": 600}
    assert doc["environment_variables"] == {"K": "V"} and doc["tags"] == {"a": "b"}


def test_a_serverless_job_keeps_its_instance_type_and_registry_environment() -> None:
    doc = from_arm(recorded("serverless"), "hello", REFS)
    assert "compute" not in doc
    assert doc["resources"] == {"instance_count": 1, "instance_type": "Standard_DS3_v2"}
    assert doc["environment"] == "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"
    spec = parse_job(doc)  # a document the native path takes as it is
    assert spec.command == "echo hi" and spec.resources.instance_type == "Standard_DS3_v2"


def test_a_full_arm_compute_id_and_data_inputs_parse_as_a_document() -> None:
    body = recorded("command_full")
    props = body["properties"]
    props["computeId"] = f"{WS}/computes/cpu-cluster"
    props.pop("environmentId")  # environment assets resolve in the store, not here
    for key in ("m",):
        props["inputs"].pop(key)
    props["outputs"].pop("reg")
    spec = parse_job(from_arm(body, "job-1", REFS))
    assert spec.compute == "cpu-cluster" and spec.resources.instance_count == 2
    assert spec.limits is not None and spec.limits.timeout == 600


@pytest.mark.parametrize(
    ("change", "target"),
    [
        ({"jobType": "Pipeline"}, "properties.jobType"),
        ({"inputs": {"x": {"jobInputType": "tabular", "uri": "a"}}}, "properties.inputs.x.jobInputType"),
        (
            {"inputs": {"x": {"jobInputType": "uri_file", "uri": "a", "mode": "Teleport"}}},
            "properties.inputs.x.mode",
        ),
        ({"distribution": {"distributionType": "Ray"}}, "properties.distribution.distributionType"),
        ({"limits": {"timeout": "ten minutes"}}, "properties.limits.timeout"),
        ({"environmentId": "conda-please"}, "properties.environmentId"),
        ({"inputs": [1]}, "properties.inputs"),
    ],
)
def test_bad_bodies_name_the_arm_field(change: dict[str, Any], target: str) -> None:
    body = recorded("serverless")
    body["properties"].update(change)
    with pytest.raises(CloudletError) as caught:
        from_arm(body, "j", REFS)
    assert caught.value.status == 400 and caught.value.target == target


def test_no_properties_is_a_400_naming_them() -> None:
    with pytest.raises(CloudletError) as caught:
        from_arm({"name": "x"}, "x", REFS)
    assert caught.value.target == "properties"


def test_durations() -> None:
    assert iso_seconds("PT10M", "t") == 600
    assert iso_seconds("P1DT1H", "t") == 90000
    assert iso_seconds("PT1.5S", "t") == 1
    assert iso_seconds("42", "t") == 42
    assert seconds_iso(600) == "PT10M" and seconds_iso(0) == "PT0S" and seconds_iso(3661) == "PT1H1M1S"


def test_arm_ids_name_their_resource() -> None:
    assert arm_name(f"azureml:{WS}/codes/c1/versions/1", "codes") == ("c1", "1")
    assert arm_name(f"{WS}/computes/gpu", "computes") == ("gpu", None)
    assert arm_name(f"{WS}/computes/gpu", "codes") is None
    assert arm_name("cpu-cluster", "computes") is None


def test_a_job_view_reads_back_in_the_arm_shape() -> None:
    view = {
        "name": "job-1",
        "command": "python train.py",
        "display_name": "train",
        "environment": "azureml:env:1",
        "compute": "cpu-cluster",
        "inputs": {"data": {"type": "uri_folder", "path": "azureml://datastores/d/paths/x/"}, "lr": "0.01"},
        "outputs": {
            "model": {
                "type": "uri_folder",
                "uri": "azureml://datastores/workspaceblobstore/paths/azureml/job-1/model/",
            }
        },
        "resources": {"instance_count": 2},
        "distribution": {"type": "pytorch", "process_count_per_instance": 2},
        "limits": {"timeout": 600},
        "status": "Running",
        "services": {"Studio": {"endpoint": "https://h/s", "job_service_type": "Studio"}},
        "creation_context": {"created_by": "alice", "created_at": "2026-12-01T00:00:00Z"},
    }
    arm = to_arm(view, WS, code_id=f"{WS}/codes/c1/versions/1")
    props = arm["properties"]
    assert arm["id"] == f"{WS}/jobs/job-1" and arm["name"] == "job-1"
    assert props["jobType"] == "Command" and props["status"] == "Running"
    assert props["computeId"] == f"{WS}/computes/cpu-cluster"
    assert props["environmentId"] == f"{WS}/environments/env/versions/1"
    assert props["inputs"]["lr"] == {"jobInputType": "literal", "value": "0.01"}
    assert props["inputs"]["data"]["jobInputType"] == "uri_folder"
    assert props["outputs"]["model"]["uri"].endswith("/job-1/model/")
    assert props["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 2}
    assert props["limits"] == {"jobLimitsType": "Command", "timeout": "PT10M"}
    # REST's JobService field names: what the SDK's ``studio_url`` reads
    assert props["services"] == {"Studio": {"endpoint": "https://h/s", "jobServiceType": "Studio"}}
    # and what went out comes back as the same document
    again = from_arm(arm, "job-1", REFS)
    assert again["compute"] == "azureml:cpu-cluster" and again["environment"] == "azureml:env:1"
    assert again["limits"] == {"timeout": 600} and again["inputs"]["lr"] == "0.01"


def test_a_workspace_environment_inlined_at_submission_reads_back_as_its_version_id() -> None:
    view = {
        "name": "job-2",
        "command": "true",
        "environment": {"name": "py", "version": "3", "image": "python"},
    }
    props = to_arm(view, WS)["properties"]
    assert props["environmentId"] == f"{WS}/environments/py/versions/3"
    # an inline environment without a version (not from the workspace) names none
    assert "environmentId" not in to_arm({**view, "environment": {"image": "python"}}, WS)["properties"]


def test_queue_settings_cross_the_wire_as_the_sdk_sends_and_reads_them() -> None:
    """azure-ai-ml sends ``queueSettings: {jobTier: "Spot", priority: 3}`` (JobTierNames,
    JobPriorityValues) and reads the same shape back; the document stores the entity's names."""
    body = {
        "properties": {
            "jobType": "Command",
            "command": "true",
            "queueSettings": {"jobTier": "Spot", "priority": 3},
        }
    }
    doc = from_arm(body, "q", REFS)
    stored = job_to_doc(parse_job(doc))["queue_settings"]
    assert stored == {"job_tier": "spot", "priority": "high"}
    view = {"name": "q", "command": "true", "queue_settings": queue_settings.shown(stored)}
    assert to_arm(view, WS)["properties"]["queueSettings"] == {"jobTier": "Spot", "priority": 3}
    # No tier given: none on the wire (the SDK reads job_tier None); the priority always.
    unset = {"name": "q", "command": "true", "queue_settings": queue_settings.shown(None)}
    assert to_arm(unset, WS)["properties"]["queueSettings"] == {"priority": 2}


def test_a_queued_jobs_wait_is_in_its_properties_as_strings() -> None:
    from cloudlet.api.arm.wire.arm_jobs import wait_properties

    waiting = {
        "code": "cluster_at_max",
        "message": "the cluster is at its maximum of 1 node, all busy",
        "position": None,
        "position_text": "10,000+",
        "eta": None,
        "eta_in_s": None,
        "as_of": "2026-12-07T08:00:00Z",
    }
    assert wait_properties(waiting) == {
        "cloudlet.wait.reason": "cluster_at_max",
        "cloudlet.wait.message": "the cluster is at its maximum of 1 node, all busy",
        "cloudlet.wait.position": "10,000+",
        "cloudlet.wait.asOf": "2026-12-07T08:00:00Z",
    }
    assert (
        wait_properties({**waiting, "position_text": "3", "eta_in_s": 120})["cloudlet.wait.etaInSeconds"]
        == "120"
    )
    assert wait_properties(None) == {}
