"""Record the ARM component bodies azure-ai-ml sends (run with the SDK's venv:
``.cache/azure-ai-ml-*/bin/python tests/data/arm_components/record.py``); the unit tests of
``api/arm/wire/arm_components.py`` read the JSON files this writes. Recorded with azure-ai-ml 1.35.2.

- ``train.json``: ``ml_client.components.create_or_update(load_component("train.yml"))`` once its
  code and environment are ARM ids (what the SDK sends after uploading them);
- ``anonymous.json``: the component of a ``command(...)`` step of a ``@dsl.pipeline``, as
  ``jobs.create_or_update`` registers it (``azureml_anonymous``, ``isAnonymous``);
- ``get_train.json``-style answers are what cloudlet renders (not recorded here)."""

import json
from collections.abc import Mapping
from pathlib import Path

from azure.ai.ml import Input, Output, command, load_component

HERE = Path(__file__).parent
WS = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"
CODE = f"azureml:{WS}/codes/c1/versions/1"
ENV = f"azureml:{WS}/environments/CliV2AnonymousEnvironment/versions/abc"
TRAIN = {
    "$schema": "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json",
    "type": "command",
    "name": "train_model",
    "display_name": "Train a model",
    "version": "3",
    "description": "trains",
    "tags": {"team": "a"},
    "is_deterministic": False,
    "inputs": {
        "training_data": {"type": "uri_folder", "description": "the data"},
        "test_file": {"type": "uri_file", "mode": "download", "optional": True},
        "base_model": {"type": "mlflow_model"},
        "table": {"type": "mltable"},
        "max_epochs": {"type": "integer", "default": 10, "min": 1, "max": 100},
        "learning_rate": {"type": "number", "default": 0.01, "min": 0.0, "max": 1.0},
        "schedule": {"type": "string", "default": "time-based", "enum": ["time-based", "step"]},
        "early_stop": {"type": "boolean", "default": True},
        "note": {"type": "string", "optional": True},
    },
    "outputs": {
        "model_output": {"type": "uri_folder", "mode": "upload", "description": "the model"},
        "metrics": {"type": "uri_file"},
        "mlflow": {"type": "mlflow_model"},
    },
    "code": CODE,
    "environment": ENV,
    "command": (
        "python train.py --data ${{inputs.training_data}} --model ${{inputs.base_model}} "
        "--table ${{inputs.table}} --epochs ${{inputs.max_epochs}} --lr ${{inputs.learning_rate}} "
        "--schedule ${{inputs.schedule}} --early ${{inputs.early_stop}} "
        "$[[--test ${{inputs.test_file}}]] $[[--note ${{inputs.note}}]] "
        "--out ${{outputs.model_output}} --metrics ${{outputs.metrics}} --mlflow ${{outputs.mlflow}}"
    ),
    "resources": {"instance_count": 2, "shm_size": "2g"},
    "distribution": {"type": "pytorch", "process_count_per_instance": 2},
}


def plain(o: object) -> object:
    if isinstance(o, Mapping):
        return {k: plain(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [plain(v) for v in o]
    return o


def write(name: str, body: object) -> None:
    (HERE / f"{name}.json").write_text(json.dumps(plain(body), indent=1) + "\n")


(HERE / "train.yml").write_text(json.dumps(TRAIN, indent=1))  # JSON is YAML
train = load_component(HERE / "train.yml")
write("train", train._to_rest_object())
(HERE / "train.yml").unlink()

step = command(
    command="python prep.py --raw ${{inputs.raw}} --n ${{inputs.n}} --out ${{outputs.prepped}}",
    code=CODE,
    environment=ENV,
    inputs={"raw": Input(type="uri_folder"), "n": 5},
    outputs={"prepped": Output(type="uri_folder", mode="rw_mount")},
    display_name="prep",
)
anonymous = step.component
anonymous._is_anonymous = True
write("anonymous", anonymous._to_rest_object())
print("name/version", anonymous._get_rest_name_version())
