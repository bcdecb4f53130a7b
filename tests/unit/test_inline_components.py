"""An inline pipeline step's anonymous component (domain.jobs.inline_components): typed from its
bindings, versioned by what it runs."""

from __future__ import annotations

from cloudlet.domain.assets.components import parse_component
from cloudlet.domain.jobs.inline_components import inline_component, inline_version, is_inline_command

PIPELINE = {
    "inputs": {"rate": 0.1, "data": {"type": "uri_file", "path": "azureml://datastores/d/paths/x.csv"}},
    "jobs": {
        "make": {"command": "make > ${{outputs.o}}/m", "outputs": {"o": {"type": "mlflow_model"}}},
        "use": {
            "command": "use ${{inputs.m}} ${{inputs.r}} ${{inputs.d}} ${{inputs.n}} ${{inputs.f}}",
            "environment": "azureml:env:1",
            "compute": "azureml:cpu",
            "inputs": {
                "m": "${{parent.jobs.make.outputs.o}}",
                "r": "${{parent.inputs.rate}}",
                "d": "${{parent.inputs.data}}",
                "n": 3,
                "f": {"type": "uri_folder", "path": "azureml://datastores/d/paths/f"},
            },
            "outputs": {"out": "${{parent.outputs.result}}"},
        },
    },
}


def test_inputs_and_outputs_are_typed_from_what_they_are_bound_to() -> None:
    doc = inline_component(PIPELINE["jobs"]["use"], PIPELINE)
    assert doc["inputs"] == {
        "m": {"type": "mlflow_model"},  # the upstream step's declared output
        "r": {"type": "number"},  # a pipeline input's literal
        "d": {"type": "uri_file"},
        "n": {"type": "integer"},
        "f": {"type": "uri_folder"},
    }
    assert doc["outputs"] == {"out": {"type": "uri_folder"}}
    assert doc["environment"] == "azureml:env:1" and "compute" not in doc
    assert parse_component(doc).command.startswith("use ")  # a component the store accepts


def test_the_version_is_what_the_step_runs_not_its_bindings() -> None:
    use = PIPELINE["jobs"]["use"]
    rebound = {**use, "compute": "azureml:gpu", "inputs": {**use["inputs"], "n": 4}}
    assert inline_version(rebound) == inline_version(use)
    assert inline_version({**use, "command": "other"}) != inline_version(use)
    assert is_inline_command(use) and not is_inline_command({"component": "azureml:c:1"})
    assert not is_inline_command({"type": "parallel"})
