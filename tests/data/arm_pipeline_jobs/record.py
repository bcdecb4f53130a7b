"""Record the ARM job bodies azure-ai-ml sends for a ``@dsl.pipeline`` of two command components
and for a ``command(...).sweep(...)`` (run with the SDK's venv:
``.cache/azure-ai-ml-*/bin/python tests/data/arm_pipeline_jobs/record.py``); the unit tests of
``api/arm/wire/arm_pipeline_jobs.py`` read the JSON files this writes. The steps' components are given
as the ARM ids ``jobs.create_or_update`` resolves them to (anonymous components registered first,
tests/integration/test_arm_components_sdk.py). Recorded with azure-ai-ml 1.35.2."""

import json
from collections.abc import Mapping
from pathlib import Path

from azure.ai.ml import Input, Output, command
from azure.ai.ml.dsl import pipeline
from azure.ai.ml.sweep import BanditPolicy, Choice, Uniform

HERE = Path(__file__).parent
WS = "/subscriptions/s/resourceGroups/r/providers/Microsoft.MachineLearningServices/workspaces/w"
ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"


def plain(o: object) -> object:
    if isinstance(o, Mapping):
        return {k: plain(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [plain(v) for v in o]
    return o


prep = command(
    command="mkdir -p ${{outputs.prepped}} && cp -r ${{inputs.raw}}/. ${{outputs.prepped}}",
    environment=ENV,
    inputs={"raw": Input(type="uri_folder")},
    outputs={"prepped": Output(type="uri_folder")},
    display_name="prep",
)
train = command(
    command="ls ${{inputs.data}} && echo epochs=${{inputs.epochs}} > ${{outputs.model}}/m.txt",
    environment=ENV,
    inputs={"data": Input(type="uri_folder"), "epochs": Input(type="integer", default=3)},
    outputs={"model": Output(type="uri_folder")},
    display_name="train",
)


@pipeline(default_compute="cpu-cluster", continue_on_step_failure=True, force_rerun=True)
def two_steps(raw, epochs):
    first = prep(raw=raw)
    second = train(data=first.outputs.prepped, epochs=epochs)
    second.compute = "gpu-cluster"
    return {"model": second.outputs.model}


job = two_steps(
    raw=Input(type="uri_folder", path="azureml://datastores/workspaceblobstore/paths/LocalUpload/h/data/"),
    epochs=4,
)
job.display_name = "two-steps"
job.experiment_name = "pipes"
job.tags = {"k": "v"}
for key, node in job.jobs.items():
    node._component = f"{WS}/components/azureml_anonymous/versions/{key}hash"

trial = command(
    experiment_name="sweeps",
    command="python train.py --lr ${{inputs.lr}} --depth ${{inputs.depth}}",
    code=f"{WS}/codes/c1/versions/1",
    environment=ENV,
    inputs={"lr": Uniform(min_value=0.01, max_value=0.1), "depth": Choice([2, 4])},
    compute="cpu-cluster",
)
sweep = trial.sweep(
    primary_metric="accuracy",
    goal="maximize",
    sampling_algorithm="random",
    early_termination_policy=BanditPolicy(slack_factor=0.2, evaluation_interval=1),
)
sweep.set_limits(max_total_trials=3, max_concurrent_trials=2, timeout=3600)
sweep.display_name = "lr-sweep"
sweep.experiment_name = "sweeps"
for name, value in (("pipeline", job), ("sweep", sweep._to_job())):
    body = plain(value._to_rest_object())
    (HERE / f"{name}.json").write_text(json.dumps(body, indent=1) + "\n")
