"""The pure rules of command components: documents in the CLI v2 ``commandComponent`` shape,
their inputs bound (defaults, required, types, min/max/enum), the command job that runs one, and
the content hash used as an anonymous version and by step reuse."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.domain.assets.components import (
    ComponentSpec,
    as_error,
    bind_inputs,
    command_job_doc,
    component_hash,
    component_to_doc,
    is_anonymous,
    parse_component,
)
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_spec import parse_job, render_command

TRAIN: dict[str, Any] = {
    "$schema": "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json",
    "type": "command",
    "name": "train_model",
    "display_name": "Train",
    "version": 1,
    "description": "trains",
    "tags": {"team": "a", "n": 3},
    "is_deterministic": False,
    "inputs": {
        "training_data": {"type": "uri_folder", "description": "the data"},
        "max_epocs": {"type": "integer", "default": 10, "min": 1, "max": 100},
        "learning_rate": {"type": "number", "default": "0.01", "min": 0, "max": 1.0},
        "learning_rate_schedule": {"type": "string", "default": "time-based", "enum": ["time-based", "step"]},
        "early_stop": {"type": "boolean", "optional": True},
    },
    "outputs": {"model_output": {"type": "uri_folder", "mode": "upload"}},
    "code": "./train_src",
    "environment": "azureml:AzureML-sklearn-1.0-ubuntu20.04-py38-cpu@latest",
    "command": (
        "python train.py --training_data ${{inputs.training_data}} --max_epocs ${{inputs.max_epocs}} "
        "--learning_rate ${{inputs.learning_rate}} --schedule ${{inputs.learning_rate_schedule}} "
        "$[[--early_stop ${{inputs.early_stop}}]] --model_output ${{outputs.model_output}}"
    ),
}
DS = "azureml://datastores/workspaceblobstore/paths/data/"


def error_of(doc: Any, name: str | None = None, version: str | None = None) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        parse_component(doc, name, version)
    return info.value


def test_a_component_in_the_cli_v2_shape() -> None:
    spec = parse_component(TRAIN)
    assert (spec.name, spec.version, spec.is_deterministic) == ("train_model", "1", False)
    assert spec.tags == {"team": "a", "n": "3"}
    assert spec.inputs["learning_rate"].default == 0.01  # the SDK sends defaults as strings
    assert spec.inputs["max_epocs"].default == 10
    assert spec.inputs["early_stop"].optional
    assert spec.outputs["model_output"].mode == "upload"
    doc = component_to_doc(spec)
    assert "$schema" not in doc and doc["name"] == "train_model"
    assert component_to_doc(parse_component(doc)) == doc  # the stored form reads back the same


def test_defaults_of_a_minimal_component() -> None:
    spec = parse_component({"command": "echo hi"})
    assert spec.type == "command" and spec.is_deterministic and spec.name is None
    assert is_anonymous(spec)
    assert spec.inputs == {} and spec.outputs == {} and spec.resources is None
    assert is_anonymous(parse_component({"name": "azureml_anonymous", "command": "echo"}))
    assert not is_anonymous(parse_component(TRAIN))


def test_spec_is_frozen() -> None:
    spec = parse_component(TRAIN)
    with pytest.raises(ValueError):
        spec.command = "rm -rf /"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "target", "words"),
    [
        ({"type": "pipeline"}, "type", "only 'command'"),
        ({"name": "Train-Model"}, "name", "lower-case letters"),
        ({"version": "latest"}, "version", "a label"),
        ({"command": "  "}, "command", "must not be empty"),
        ({"command": "python x.py ${{inputs.nope}}"}, "command", "'nope' is not declared"),
        ({"command": "python x.py ${{outputs.nope}}"}, "command", "declared outputs: model_output"),
        ({"inputs": {"bad-name": {"type": "string"}}}, "inputs.bad-name", "letters, digits"),
        ({"inputs": {"x": "string"}}, "inputs.x", "must be a mapping"),
        ({"inputs": {"x": {"type": "float"}}}, "inputs.x.type", "must be one of"),
        ({"inputs": {"x": {}}}, "inputs.x.type", "required"),
        ({"inputs": {"x": {"type": "integer", "default": "ten"}}}, "inputs.x.default", "not a valid integer"),
        ({"inputs": {"x": {"type": "integer", "default": 0, "min": 1}}}, "inputs.x.default", "below"),
        ({"inputs": {"x": {"type": "number", "min": 2, "max": 1}}}, "inputs.x.min", "greater than max"),
        ({"inputs": {"x": {"type": "string", "min": 1}}}, "inputs.x.min", "no min/max"),
        ({"inputs": {"x": {"type": "integer", "enum": ["1"]}}}, "inputs.x.enum", "string inputs"),
        ({"inputs": {"x": {"type": "string", "default": "c", "enum": ["a"]}}}, "inputs.x.default", "one of"),
        ({"inputs": {"x": {"type": "uri_folder", "default": "./d"}}}, "inputs.x.default", "takes no"),
        ({"inputs": {"x": {"type": "uri_folder", "mode": "sideways"}}}, "inputs.x.mode", "ro_mount"),
        ({"inputs": {"x": {"type": "string", "mode": "ro_mount"}}}, "inputs.x.mode", "data and model"),
        ({"inputs": {"x": {"type": "string", "colour": 1}}}, "inputs.x.colour", "unknown field"),
        ({"outputs": {"m": {"type": "uri_folder", "mode": "ro_mount"}}}, "outputs.m.mode", "rw_mount"),
        ({"outputs": {"m": {"type": "string_table"}}}, "outputs.m.type", "must be one of"),
        ({"environment_variables": {"N": 3}}, "environment_variables.N", "quote it"),
        ({"distribution": {"type": "horovod"}}, "distribution.type", "pytorch"),
        (
            {"distribution": {"type": "pytorch", "process_count_per_instance": 0}},
            "distribution.process_count_per_instance",
            "≥ 1",
        ),
        ({"environment": {"name": "e"}}, "environment", "'image', 'conda_file', 'build' or 'pip'"),
        ({"resources": {"instance_count": 0}}, "resources.instance_count", "≥ 1"),
        ({"compute": "cpu-cluster"}, "compute", "set it on the job or pipeline step"),
        ({"additional_includes": [""]}, "additional_includes[0]", "at least 1 character"),
    ],
)
def test_errors_name_the_field_and_the_fix(change: dict[str, Any], target: str, words: str) -> None:
    doc = {**TRAIN, **change}
    if "command" not in change:
        doc["command"] = "echo ${{outputs.model_output}}"  # no stale references to inputs changed away
        doc["outputs"] = change.get("outputs", TRAIN["outputs"])
        if "outputs" in change:
            doc["command"] = "echo hi"
    err = error_of(doc)
    assert err.target == target, err
    assert words in err.message, err.message
    assert err.status == 400


def test_an_optional_input_outside_an_optional_part_is_refused() -> None:
    seed: dict[str, Any] = {"type": "integer", "optional": True}
    doc = {"inputs": {"seed": seed}, "command": "python x.py ${{inputs.seed}}"}
    err = error_of(doc)
    assert err.target == "command" and "$[[--seed ${{inputs.seed}}]]" in err.message
    # With a default it always has a value, so it may appear anywhere.
    seed["default"] = 1
    assert parse_component(doc).inputs["seed"].default == 1


def test_url_name_and_version_must_agree_with_the_body() -> None:
    assert parse_component({"command": "echo"}, "train", "2").version == "2"
    assert error_of(TRAIN, "other").target == "name"
    assert error_of(TRAIN, None, "7").target == "version"
    assert error_of(["not", "a", "mapping"]).target == "$"


def test_unknown_environment_names_are_refused() -> None:
    err = error_of({**TRAIN, "environment": "no-such-env"})
    assert err.target == "environment"


# ----------------------------------------------------------------------------------------------
# Binding.


def test_bind_applies_defaults_types_and_leaves_out_absent_optionals() -> None:
    spec = parse_component(TRAIN)
    bound = bind_inputs(spec, {"training_data": DS, "max_epocs": "20"})
    assert bound == {
        "training_data": {"type": "uri_folder", "path": DS},
        "max_epocs": 20,
        "learning_rate": 0.01,
        "learning_rate_schedule": "time-based",
    }
    assert bind_inputs(spec, bound) == bound  # binding is idempotent
    again = bind_inputs(spec, {"training_data": {"path": DS, "mode": "download"}, "early_stop": "true"})
    assert again["training_data"] == {"type": "uri_folder", "path": DS, "mode": "download"}
    assert again["early_stop"] is True
    assert bind_inputs(spec, {"training_data": DS, "max_epocs": {"value": 5}})["max_epocs"] == 5


def test_a_declared_input_mode_is_the_default_mode() -> None:
    spec = parse_component(
        {"inputs": {"d": {"type": "uri_file", "mode": "download"}}, "command": "cat ${{inputs.d}}"}
    )
    assert bind_inputs(spec, {"d": DS + "a.csv"})["d"]["mode"] == "download"
    assert bind_inputs(spec, {"d": {"path": DS, "mode": "ro_mount"}})["d"]["mode"] == "ro_mount"


@pytest.mark.parametrize(
    ("given", "target", "words"),
    [
        ({}, "inputs.training_data", "required by component 'train_model'"),
        ({"training_data": DS, "epochs": 3}, "inputs.epochs", "not an input of component 'train_model'"),
        ({"training_data": DS, "max_epocs": 0}, "inputs.max_epocs", "below the minimum 1"),
        ({"training_data": DS, "max_epocs": 1000}, "inputs.max_epocs", "above the maximum 100"),
        ({"training_data": DS, "max_epocs": 2.5}, "inputs.max_epocs", "not a valid integer"),
        ({"training_data": DS, "learning_rate": "fast"}, "inputs.learning_rate", "not a valid number"),
        (
            {"training_data": DS, "learning_rate_schedule": "cosine"},
            "inputs.learning_rate_schedule",
            "one of",
        ),
        ({"training_data": DS, "early_stop": "maybe"}, "inputs.early_stop", "not a valid boolean"),
        ({"training_data": 3}, "inputs.training_data", "give a path"),
        ({"training_data": {"mode": "download"}}, "inputs.training_data", "give a path"),
        ({"training_data": "${{parent.inputs.data}}"}, "inputs.training_data", "a binding"),
        (
            {"training_data": DS, "learning_rate_schedule": "${{parent.inputs.s}}"},
            "inputs.learning_rate_schedule",
            "binding",
        ),
    ],
)
def test_bind_errors_name_the_input(given: dict[str, Any], target: str, words: str) -> None:
    with pytest.raises(CloudletError) as info:
        bind_inputs(parse_component(TRAIN), given)
    assert info.value.target == target
    assert words in info.value.message, info.value.message


# ----------------------------------------------------------------------------------------------
# The command job that runs a component.


def test_command_job_doc_is_a_job_parse_job_accepts() -> None:
    spec = parse_component(
        {**TRAIN, "environment_variables": {"A": "1", "B": "2"}, "resources": {"shm_size": "2g"}}
    )
    doc = command_job_doc(
        spec,
        {"training_data": DS, "learning_rate": 0.5},
        {"model_output": {"path": "azureml://datastores/workspaceblobstore/paths/out/"}},
        {
            "compute": "azureml:cpu-cluster",
            "environment_variables": {"B": "3"},
            "resources": {"instance_count": 2},
            "tags": {"step": "train"},
            "display_name": "train step",
        },
    )
    assert doc["environment_variables"] == {"A": "1", "B": "3"}
    assert doc["resources"] == {"instance_count": 2, "shm_size": "2g"}
    assert doc["tags"] == {"team": "a", "n": "3", "step": "train"}
    assert doc["outputs"]["model_output"]["mode"] == "upload"
    job = parse_job(doc)
    assert job.compute == "cpu-cluster" and job.display_name == "train step"
    assert job.code == "./train_src" and job.environment == TRAIN["environment"]
    assert job.resources.instance_count == 2
    command = render_command(
        job.command,
        {
            "training_data": "/mnt/d",
            "max_epocs": "10",
            "learning_rate": "0.5",
            "learning_rate_schedule": "step",
        },
        {"model_output": "/mnt/o"},
    )
    assert "--early_stop" not in command  # the absent optional input's part is dropped
    assert "--learning_rate 0.5" in command


def test_command_job_doc_without_outputs_given_still_declares_them() -> None:
    spec = parse_component(TRAIN)
    doc = command_job_doc(spec, {"training_data": DS}, {}, {})
    assert doc["outputs"] == {"model_output": {"type": "uri_folder", "mode": "upload"}}
    assert "compute" not in doc and "environment_variables" not in doc
    assert parse_job(doc).outputs["model_output"].mode == "upload"


def test_command_job_doc_refuses_unknown_overrides_and_outputs() -> None:
    spec = parse_component(TRAIN)
    with pytest.raises(CloudletError) as info:
        command_job_doc(spec, {"training_data": DS}, {}, {"command": "rm -rf /"})
    assert info.value.target == "command" and "allowed: name" in info.value.message
    with pytest.raises(CloudletError) as info:
        command_job_doc(spec, {"training_data": DS}, {"model": {}}, {})
    assert info.value.target == "outputs.model" and "model_output" in info.value.message


def test_inline_environment_and_distribution_carry_over() -> None:
    spec = parse_component(
        {
            "command": "python -c 1",
            "environment": {"image": "python:3.11", "pip": ["numpy"]},
            "distribution": {"type": "pytorch", "process_count_per_instance": 2},
        }
    )
    job = parse_job(command_job_doc(spec, {}, {}, {}))
    assert job.distribution is not None and job.distribution.type == "pytorch"
    assert job.environment is not None and not isinstance(job.environment, str)
    assert job.environment.pip == ["numpy"]


# ----------------------------------------------------------------------------------------------
# The content hash.


def test_hash_is_stable_and_follows_what_runs() -> None:
    spec = parse_component(TRAIN)
    first = component_hash(spec, "codes/" + "a" * 64)
    assert first == component_hash(parse_component(dict(TRAIN)), "codes/" + "a" * 64)
    assert len(first) == 64 and int(first, 16) >= 0
    # name and version are not content; everything that runs is.
    assert (
        component_hash(parse_component({**TRAIN, "name": "other", "version": "9"}), "codes/" + "a" * 64)
        == first
    )
    assert component_hash(spec, "codes/" + "b" * 64) != first
    assert (
        component_hash(parse_component({**TRAIN, "command": TRAIN["command"] + " -v"}), "codes/" + "a" * 64)
        != first
    )
    assert component_hash(parse_component({**TRAIN, "is_deterministic": True}), "codes/" + "a" * 64) != first
    # Key order of the document does not matter.
    reordered = dict(reversed(list(TRAIN.items())))
    assert component_hash(parse_component(reordered), "codes/" + "a" * 64) == first
    assert component_hash(spec, None) != first  # without a snapshot the code path itself counts


def test_as_error_puts_the_target_under_a_step() -> None:
    err = error_of({**TRAIN, "name": "Bad"})
    moved = as_error(err, "jobs.train.component")
    assert moved.target == "jobs.train.component.name" and moved.message == err.message


def test_spec_type_is_exported() -> None:
    assert isinstance(parse_component(TRAIN), ComponentSpec)
