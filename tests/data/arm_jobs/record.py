"""Record the ARM job bodies azure-ai-ml sends for two command jobs (run with the SDK's venv:
``.cache/azure-ai-ml-*/bin/python tests/data/arm_jobs/record.py``); the unit tests of
``api/arm/wire/arm_jobs.py`` read the JSON files this writes. Recorded with azure-ai-ml 1.35.2."""

import json
from collections.abc import Mapping
from pathlib import Path

from azure.ai.ml import Input, Output, command
from azure.ai.ml.constants import AssetTypes
from azure.ai.ml.entities import ResourceConfiguration

HERE = Path(__file__).parent
WS = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"


def plain(o: object) -> object:
    if isinstance(o, Mapping):
        return {k: plain(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [plain(v) for v in o]
    return o


full = command(
    name="job-1",
    display_name="train",
    experiment_name="exp",
    description="d",
    tags={"a": "b"},
    command="python train.py --data ${{inputs.data}} --lr ${{inputs.lr}} --out ${{outputs.model}}",
    code=f"azureml:{WS}/codes/c1/versions/1",
    environment=f"azureml:{WS}/environments/env/versions/1",
    inputs={
        "data": Input(
            type=AssetTypes.URI_FOLDER,
            path="azureml://datastores/workspaceblobstore/paths/LocalUpload/abc/data/",
        ),
        "lr": 0.01,
        "n": 3,
        "flag": True,
        "s": "x",
        "m": Input(type=AssetTypes.MLFLOW_MODEL, path="azureml:mymodel:1"),
        "f": Input(type=AssetTypes.URI_FILE, path="https://example.com/a.csv", mode="download"),
    },
    outputs={
        "model": Output(type=AssetTypes.URI_FOLDER),
        "reg": Output(type=AssetTypes.MLFLOW_MODEL, name="my-model"),
    },
    environment_variables={"K": "V"},
    compute="cpu-cluster",
    instance_count=2,
    distribution={"type": "pytorch", "process_count_per_instance": 2},
    timeout=600,
    shm_size="2g",
)
serverless = command(
    command="echo hi", environment="azureml://registries/azureml/environments/sklearn-1.5/labels/latest"
)
serverless.resources = ResourceConfiguration(instance_type="Standard_DS3_v2", instance_count=1)
for name, job in (("command_full", full), ("serverless", serverless)):
    body = plain(job._to_job()._to_rest_object())
    (HERE / f"{name}.json").write_text(json.dumps(body, indent=1) + "\n")
