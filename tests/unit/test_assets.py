"""The pure rules of data, model and environment assets: documents in the CLI v2 shapes, the
references jobs write, auto-increment versions, @latest, immutability, output registration, and
the curated environments' data file."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest
import yaml

from cloudlet.domain.assets import assets
from cloudlet.domain.assets.assets import (
    AssetRef,
    VersionRow,
    next_version,
    parse_asset,
    parse_reference,
    pick_latest,
)
from cloudlet.domain.assets.environments import CURATED_ENVIRONMENTS, curated_environment, load_curated
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_spec import parse_job

DS = "azureml://datastores/workspaceblobstore/paths/LocalUpload/abc/iris.csv"


def error_of(kind: Any, doc: Any, name: str | None = None, version: str | None = None) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        parse_asset(kind, doc, name, version)
    return info.value


def test_data_document_in_the_cli_v2_shape() -> None:
    doc = {
        "$schema": "https://azuremlschemas.azureedge.net/latest/data.schema.json",
        "name": "iris",
        "version": 1,
        "type": "uri_file",
        "path": DS,
        "tags": {"n": 3},
        "description": "d",
    }
    spec = parse_asset("data", doc)
    assert (spec.name, spec.version) == ("iris", "1")
    assert spec.doc == {
        "type": "uri_file",
        "path": DS,
        "description": "d",
        "tags": {"n": "3"},
        "properties": {},
    }
    assert parse_asset("data", {"name": "x", "path": "https://example.com/a.csv"}).doc["type"] == "uri_folder"


@pytest.mark.parametrize(
    ("kind", "doc", "target", "words"),
    [
        ("data", {"name": "x"}, "path", "required"),
        ("data", {"name": "x", "path": "./local"}, "path", "uploads it once"),
        ("data", {"name": "x", "path": "s3://b/k"}, "path", "only azureml://datastores"),
        ("data", {"name": "x", "path": "azureml://datastores/d"}, "path", "/paths/"),
        ("data", {"name": "x", "path": DS, "type": "csv"}, "type", "uri_file"),
        ("data", {"name": "-bad", "path": DS}, "name", "letters"),
        ("data", {"name": "x", "path": DS, "version": "latest"}, "version", "label"),
        ("data", {"name": "x", "path": DS, "versoin": "1"}, "versoin", ""),
        ("model", {"name": "m", "path": DS, "type": "onnx_model"}, "type", "mlflow_model"),
        ("environment", {"name": "e"}, "$", "image"),
        ("environment", {"name": "e", "conda_file": "conda.yaml"}, "conda_file", "local file"),
        ("environment", {"name": "e", "build": {"path": "./ctx"}}, "build", "requirements.txt"),
    ],
)
def test_bad_documents_name_the_field(kind: Any, doc: dict[str, Any], target: str, words: str) -> None:
    error = error_of(kind, doc)
    assert error.target == target and error.status == 400, error
    assert words in error.message, error.message


def test_the_sdks_long_datastore_uri_is_stored_short() -> None:
    long = (
        "azureml://subscriptions/s/resourcegroups/r/workspaces/w/datastores/workspaceblobstore/paths/"
        "LocalUpload/abc/iris.csv"
    )
    assert parse_asset("data", {"name": "x", "path": long}).doc["path"] == DS
    assert assets.short_datastore_uri("https://example.com/x") == "https://example.com/x"


def test_url_name_and_version_must_agree_with_the_body() -> None:
    assert error_of("data", {"name": "a", "path": DS}, "b").target == "name"
    assert error_of("data", {"name": "a", "path": DS, "version": "2"}, "a", "3").target == "version"
    spec = parse_asset("model", {"path": DS}, "m", "7")
    assert (spec.name, spec.version, spec.doc["type"]) == ("m", "7", "custom_model")


def test_environment_shapes() -> None:
    conda = {"dependencies": ["python=3.11", {"pip": ["six"]}]}
    assert parse_asset("environment", {"name": "e", "image": "python:3.11", "conda_file": conda}).doc["image"]
    assert parse_asset("environment", {"name": "e", "pip": ["six==1.16.0"]}).doc["pip"] == ["six==1.16.0"]


def test_next_version_and_latest() -> None:
    assert next_version([]) == "1"
    assert next_version(["1", "2", "10", "beta", "1.5"]) == "11"
    rows = [VersionRow("1", False, 1), VersionRow("3", False, 2), VersionRow("2", True, 3)]
    latest = pick_latest(rows)
    assert latest is not None and latest.version == "3"  # the newest not archived, not the highest
    assert pick_latest([VersionRow("1", True, 1)]) is None


def test_only_description_tags_properties_and_stage_change() -> None:
    current = {"type": "uri_file", "path": DS, "tags": {}, "properties": {}}
    updated = assets.updated_doc("data", current, {**current, "description": "new", "tags": {"a": "b"}})
    assert updated["description"] == "new" and updated["tags"] == {"a": "b"} and updated["path"] == DS
    with pytest.raises(CloudletError) as info:
        assets.updated_doc("data", current, {**current, "path": "https://example.com/x"})
    assert info.value.status == 409 and info.value.target == "path"


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("azureml:iris:1", AssetRef(None, "iris", "1")),
        ("azureml:iris@latest", AssetRef(None, "iris", None)),
        (
            "azureml:/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/"
            "workspaces/w/data/iris/versions/2",
            AssetRef("data", "iris", "2"),
        ),
        ("azureml://locations/l/workspaces/w/models/m/labels/latest", AssetRef("model", "m", None)),
        (
            "/subscriptions/s/resourceGroups/r/workspaces/w/environments/e/versions/3",
            AssetRef("environment", "e", "3"),
        ),
    ],
)
def test_references(text: str, ref: AssetRef) -> None:
    assert parse_reference(text) == ref


@pytest.mark.parametrize(
    "text",
    [
        DS,
        "azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
        "./data",
        "codes/" + "0" * 64,
    ],
)
def test_not_references(text: str) -> None:
    assert parse_reference(text) is None


def test_unknown_label_is_refused() -> None:
    with pytest.raises(CloudletError) as info:
        parse_reference("azureml:iris@stable")
    assert "only label is 'latest'" in info.value.message


def test_jobs_name_models_and_register_outputs() -> None:
    job = parse_job(
        {
            "command": "ls ${{inputs.m}} ${{outputs.out}}",
            "compute": "azureml:c",
            "inputs": {"m": {"type": "mlflow_model", "path": "azureml:m:1"}},
            "outputs": {"out": {"type": "mlflow_model", "name": "trained", "version": 2}},
            "environment": "azureml:my-env@latest",
        }
    )
    assert job.outputs["out"].version == "2"
    assert assets.output_registration({"type": "mlflow_model", "name": "trained"}) == (
        "model",
        "trained",
        None,
    )
    assert assets.output_registration({"type": "uri_folder", "name": "d", "version": "1"}) == (
        "data",
        "d",
        "1",
    )
    assert assets.output_registration({"type": "uri_folder"}) is None
    assert assets.input_kind("triton_model") == "model" and assets.input_kind("mltable") == "data"
    with pytest.raises(CloudletError) as info:
        parse_job({"command": "x", "compute": "c", "outputs": {"o": {"version": "1"}}})
    assert info.value.target == "outputs.o.version"


def test_curated_data_file_is_reviewed_shape() -> None:
    text = resources.files("cloudlet.domain").joinpath("data/curated_environments.yaml").read_text()
    doc = yaml.safe_load(text)
    assert load_curated(doc) == CURATED_ENVIRONMENTS
    families = {"sklearn", "lightgbm", "pytorch", "tensorflow"}
    assert all(any(f in name for name in CURATED_ENVIRONMENTS) for f in families)
    assert re.fullmatch(r"[0-9a-f]{40}", doc["source"]["commit"])  # generated from azureml-assets
    for name, entry in doc["environments"].items():
        assert entry["source"].startswith(f"assets/training/general/environments/{name}/context/"), name
        if entry["mlflow"]:
            assert any(p.startswith("mlflow") for p in entry["pip"]), name
    assert curated_environment("azureml:AzureML-lightgbm-3.3@latest") is CURATED_ENVIRONMENTS["lightgbm-3.3"]
    with pytest.raises(ValueError, match="mlflow"):
        load_curated({"environments": {"x": {"pip": ["numpy"], "mlflow": True}}})
    with pytest.raises(ValueError, match="pip"):
        load_curated({"environments": {"x": {"pip": []}}})
