"""Environments, data and models between the ARM shapes azure-ai-ml sends and parses and cloudlet's
asset documents (api/arm/wire/arm_assets.py), checked through the native rules (domain/assets/assets.py)."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.api.arm.wire.arm_assets import (
    ContainerRow,
    VersionRow,
    arm_target,
    container_view,
    from_arm,
    list_view,
    version_view,
)
from cloudlet.domain.assets.assets import AssetKind, parse_asset, updated_doc
from cloudlet.domain.errors import CloudletError

WS = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"
LONG = "azureml://subscriptions/s/resourcegroups/r/workspaces/w/datastores/workspaceblobstore/paths/LocalUpload/abc/f"


def row(spec: dict[str, Any], name: str = "n", version: str = "1", archived: bool = False) -> VersionRow:
    return VersionRow(name, version, spec, archived, "alice", 1_700_000_000.0, 1_700_000_100.0)


def test_a_data_version_from_the_sdk_becomes_the_native_document() -> None:
    body = {
        "properties": {
            "dataType": "uri_folder",
            "dataUri": LONG,
            "description": "d",
            "tags": {"a": "b"},
            "properties": {},
            "isAnonymous": False,
            "isArchived": False,
        }
    }
    arm = from_arm("data", body, "w")
    assert arm.archived is False
    spec = parse_asset("data", arm.doc, "d", "1")
    assert spec.doc["path"] == "azureml://datastores/workspaceblobstore/paths/LocalUpload/abc/f"
    assert (spec.doc["type"], spec.doc["tags"], spec.doc["description"]) == ("uri_folder", {"a": "b"}, "d")


def test_a_long_datastore_uri_of_another_workspace_is_refused() -> None:
    with pytest.raises(CloudletError) as err:
        from_arm("data", {"properties": {"dataUri": LONG.replace("/w/", "/other/")}}, "w")
    assert err.value.target == "properties.dataUri" and "'other'" in err.value.message


@pytest.mark.parametrize("body", [None, [], {"properties": "x"}, {"name": "n"}])
def test_a_body_without_properties_is_refused(body: Any) -> None:
    with pytest.raises(CloudletError) as err:
        from_arm("model", body, "w")
    assert err.value.status == 400 and err.value.target == "properties"


def test_an_environment_carries_its_conda_file_as_yaml_text() -> None:
    body = {
        "properties": {
            "image": "python:3.11-slim",
            "condaFile": "name: c\ndependencies:\n- python=3.11\n- pip:\n  - six\n",
            "osType": "Linux",
            "isAnonymous": True,
            "autoRebuild": "Disabled",
        }
    }
    doc = from_arm("environment", body, "w").doc
    assert doc == {
        "image": "python:3.11-slim",
        "conda_file": {"name": "c", "dependencies": ["python=3.11", {"pip": ["six"]}]},
    }
    view = version_view(
        "environment", WS, row(parse_asset("environment", doc, "e").doc, name="CliV2AnonymousEnvironment")
    )
    props = view["properties"]
    assert props["condaFile"].startswith("name: c\n") and props["isAnonymous"] is True
    assert props["osType"] == "Linux" and props["image"] == "python:3.11-slim"
    with pytest.raises(CloudletError) as err:
        from_arm("environment", {"properties": {"condaFile": "[1, 2]"}}, "w")
    assert err.value.target == "properties.condaFile"


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        ("data", {"type": "uri_file", "path": "https://h/a.csv", "tags": {"t": "1"}, "description": "x"}),
        ("model", {"type": "mlflow_model", "path": "azureml://datastores/d/paths/m", "properties": {}}),
        (
            "model",
            {"type": "custom_model", "path": "https://h/m", "flavors": {"py": {"a": "b"}}, "stage": "Prod"},
        ),
        ("environment", {"image": "python:3.11", "conda_file": {"dependencies": ["pip"]}}),
    ],
)
def test_what_a_version_reads_back_as_puts_back_unchanged(kind: AssetKind, spec: dict[str, Any]) -> None:
    """The SDK archives by PUTting what it read with isArchived flipped: no immutable field may
    seem to change."""
    stored = parse_asset(kind, spec, "n", "1").doc
    view = version_view(kind, WS, row(stored))
    assert view["id"].endswith("/versions/1") and view["name"] == "1"
    assert view["systemData"]["createdBy"] == "alice"
    view["properties"]["isArchived"] = True
    arm = from_arm(kind, view, "w")
    assert arm.archived is True
    again = parse_asset(kind, arm.doc, "n", "1").doc
    assert updated_doc(kind, stored, again) == stored


def test_a_container_says_its_latest_and_next_version() -> None:
    latest = row({"type": "uri_folder", "path": "https://h/x", "description": "newest"}, version="3")
    view = container_view("data", WS, ContainerRow("n", latest, "4", False))
    assert view["id"] == f"{WS}/data/n" and view["name"] == "n"
    props = view["properties"]
    assert (props["latestVersion"], props["nextVersion"], props["isArchived"]) == ("3", "4", False)
    assert props["description"] == "newest"


def test_native_targets_are_renamed_as_the_arm_body_names_them() -> None:
    assert arm_target("data", "path") == "properties.dataUri"
    assert arm_target("model", "type") == "properties.modelType"
    assert arm_target("environment", "conda_file.dependencies") == "properties.condaFile.dependencies"
    assert arm_target("data", "tags.x") == "properties.tags.x"
    assert arm_target("data", "$") == "properties"
    assert arm_target("data", "version") == "version" and arm_target("data", None) is None


def test_list_view_types() -> None:
    views = [list_view(v) for v in (None, "ActiveOnly", "archived_only", "All")]
    assert views == ["active_only", "active_only", "archived_only", "all"]
    with pytest.raises(CloudletError) as err:
        list_view("Everything")
    assert err.value.target == "listViewType"
