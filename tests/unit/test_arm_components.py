"""Component versions between the ARM bodies azure-ai-ml 1.35.2 sends (recorded in
tests/data/arm_components/ by record.py there) and cloudlet's component documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cloudlet.api.arm.wire import arm_components
from cloudlet.api.arm.wire.arm_assets import VersionRow
from cloudlet.domain.assets.components import command_job_doc, component_to_doc, parse_component
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_spec import parse_job

DATA = Path(__file__).parents[1] / "data" / "arm_components"
WS = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"


def recorded(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return body


def test_the_sdks_component_reads_as_the_yaml_it_came_from() -> None:
    arm = arm_components.from_arm(recorded("train"), "train_model", "3")
    assert arm.archived is False and not arm.anonymous
    assert "_source" not in arm.doc and "$schema" not in arm.doc
    spec = parse_component(arm.doc)
    assert (spec.name, spec.version, spec.is_deterministic) == ("train_model", "3", False)
    assert spec.inputs["max_epochs"].default == 10 and spec.inputs["max_epochs"].max == 100
    assert spec.inputs["learning_rate"].default == 0.01
    assert spec.inputs["early_stop"].default is True  # the SDK sends "True"
    assert spec.inputs["schedule"].enum == ["time-based", "step"]
    assert spec.inputs["test_file"].optional and spec.inputs["test_file"].mode == "download"
    assert spec.outputs["model_output"].mode == "upload"
    assert spec.properties == {"client_component_hash": "43506b8f-3481-c977-666d-cc818e3a327c"}
    assert spec.resources is not None and spec.resources.instance_count == 2
    assert spec.distribution is not None and spec.distribution.type == "pytorch"
    assert spec.code is not None and spec.code.endswith("/codes/c1/versions/1")


def test_an_anonymous_component_takes_the_urls_version() -> None:
    body = recorded("anonymous")
    assert body["properties"]["componentSpec"]["version"] == "1"  # what the SDK sends
    arm = arm_components.from_arm(body, "azureml_anonymous", "70747671-e11b-6401-5120-3aaf927a6d3a")
    assert arm.anonymous
    spec = parse_component(arm.doc)
    assert spec.version == "70747671-e11b-6401-5120-3aaf927a6d3a"
    assert spec.inputs["n"].default == 5 and spec.display_name == "prep"


def test_a_named_yaml_component_registered_anonymously_takes_the_urls_name() -> None:
    # load_component("train_model.yml") in a @pipeline: the spec keeps its YAML name and version.
    body = recorded("anonymous")
    spec_body = body["properties"]["componentSpec"]
    spec_body.update(name="train_model", version="0.0.1")
    spec_body.pop("display_name")
    arm = arm_components.from_arm(body, "azureml_anonymous", "h1")
    spec = parse_component(arm.doc)
    assert (spec.name, spec.version, spec.display_name) == ("azureml_anonymous", "h1", "train_model")
    named = arm_components.from_arm(recorded("anonymous") | {}, "azureml_anonymous", "h2")
    assert parse_component(named.doc).display_name == "prep"  # its own display name is kept


def test_a_named_components_versions_must_agree() -> None:
    with pytest.raises(CloudletError) as info:
        arm_components.from_arm(recorded("train"), "train_model", "4")
    assert info.value.target == "properties.componentSpec.version"


@pytest.mark.parametrize(
    ("body", "target"),
    [
        ([], "properties"),
        ({"properties": {}}, "properties.componentSpec"),
        ({"properties": {"componentSpec": {"command": "x"}, "isArchived": "yes"}}, "properties.isArchived"),
    ],
)
def test_malformed_bodies_name_the_property(body: Any, target: str) -> None:
    with pytest.raises(CloudletError) as info:
        arm_components.from_arm(body, "c", "1")
    assert info.value.target == target


def test_native_targets_become_arm_properties() -> None:
    assert arm_components.arm_target("inputs.n.default") == "properties.componentSpec.inputs.n.default"
    assert arm_components.arm_target("$") == "properties.componentSpec"
    assert arm_components.arm_target("properties.isArchived") == "properties.isArchived"
    assert arm_components.arm_target(None) is None


def test_the_view_reads_back_as_the_same_component() -> None:
    arm = arm_components.from_arm(recorded("train"), "train_model", "3")
    stored = {
        k: v for k, v in component_to_doc(parse_component(arm.doc)).items() if k not in ("name", "version")
    }
    stored["code"] = "codes/" + "a" * 64
    row = VersionRow("train_model", "3", stored, False, "alice", 1.0, 2.0)
    view = arm_components.version_view(WS, row, f"{WS}/codes/c1/versions/1")
    assert view["id"] == f"{WS}/components/train_model/versions/3" and view["name"] == "3"
    assert view["type"] == "Microsoft.MachineLearningServices/workspaces/components/versions"
    spec = view["properties"]["componentSpec"]
    assert spec["code"] == f"azureml:{WS}/codes/c1/versions/1"
    assert spec["inputs"]["max_epochs"]["default"] == "10"  # strings, as the REST API carries them
    assert spec["inputs"]["early_stop"]["default"] == "True"
    assert view["properties"]["isAnonymous"] is False and view["properties"]["tags"] == {"team": "a"}
    # The SDK re-PUTs what it got (archive): the same document comes back.
    again = arm_components.from_arm(
        {"properties": {**view["properties"], "isArchived": True}}, "train_model", "3"
    )
    assert again.archived is True
    assert component_to_doc(parse_component(again.doc)) == component_to_doc(parse_component(arm.doc))


def test_a_recorded_component_runs_as_a_command_job() -> None:
    spec = parse_component(arm_components.from_arm(recorded("anonymous"), "azureml_anonymous", "h").doc)
    data = "azureml://datastores/workspaceblobstore/paths/raw/"
    job = parse_job(command_job_doc(spec, {"raw": data}, {}, {"compute": "cpu-cluster"}))
    assert job.command.startswith("python prep.py") and job.compute == "cpu-cluster"
    assert job.inputs["n"] == 5 and job.outputs["prepped"].mode == "rw_mount"
