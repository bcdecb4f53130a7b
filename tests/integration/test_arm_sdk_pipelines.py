"""Pipelines and sweeps through the official azure-ai-ml SDK, unmodified, over HTTPS (the ARM facade:
api/arm/jobs.py, api/arm/wire/arm_pipeline_jobs.py): a ``@dsl.pipeline`` of two ``command`` components
(a local data folder and a literal in, the first's output feeding the second), submitted with
``jobs.create_or_update`` (its steps registered as anonymous components, its ``x-azureml-token``
checked) → ``jobs.stream`` prints the
pipeline's execution log and returns when it ends → Completed; ``jobs.list(parent_job_name=…)``
lists both steps (run history's children), ``jobs.get`` reads a step and ``jobs.download`` its
output (what went through both steps), and the pipeline's own output (by name and ``all=True``:
run history's ``rundata`` names it, the data plane's ``batchGetResolvedUris`` finds the step's path). Then
``command(inputs={"lr": Uniform(…)}).sweep(…)`` with three trials that log the metric with MLflow
→ Completed, its trials listed with their metric's values. One SDK process, as a notebook runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import served

SDK_SCRIPT = r"""
import contextlib, io, json, pathlib
from azure.ai.ml import Input, MLClient, Output, command
from azure.ai.ml.dsl import pipeline
from azure.ai.ml.entities import AmlCompute
from azure.ai.ml.sweep import Uniform
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

def streamed(name):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ml.jobs.stream(name)
    return buf.getvalue()

ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"
ml = MLClient.from_config(DefaultAzureCredential())
ml.compute.begin_create_or_update(
    AmlCompute(name="pipe-cpu", size="Standard_DS3_v2", min_instances=0, max_instances=2,
               idle_time_before_scale_down=300)
).result()

prep = command(
    command="cat ${{inputs.raw}}/rows.csv > ${{outputs.prepped}}/data.txt"
            " && echo rows=${{inputs.rows}} >> ${{outputs.prepped}}/data.txt",
    environment=ENV,
    inputs={"rows": Input(type="integer"), "raw": Input(type="uri_folder")},
    outputs={"prepped": Output(type="uri_folder")},
    display_name="prep",
)
train = command(
    command="cat ${{inputs.data}}/data.txt && cp ${{inputs.data}}/data.txt ${{outputs.model}}/model.txt",
    environment=ENV,
    inputs={"data": Input(type="uri_folder")},
    outputs={"model": Output(type="uri_folder")},
    display_name="train",
)

@pipeline(default_compute="pipe-cpu")
def two_steps(rows, raw):
    first = prep(rows=rows, raw=raw)
    second = train(data=first.outputs.prepped)
    return {"model": second.outputs.model}

pipe = two_steps(rows=7, raw=Input(type="uri_folder", path="./data"))
pipe.display_name = "sdk-pipeline"
pipe.experiment_name = "sdk-pipes"
created = ml.jobs.create_or_update(pipe)
out("created", name=created.name, type=created.type, status=str(created.status))
out("stream", text=streamed(created.name))
done = ml.jobs.get(created.name)
out("done", status=str(done.status), type=done.type, steps=sorted(done.jobs),
    display=done.display_name, compute=done.settings.default_compute)
children = list(ml.jobs.list(parent_job_name=created.name))
out("children", names=[c.name for c in children], displays=sorted(c.display_name for c in children),
    statuses=[str(c.status) for c in children])
step = ml.jobs.get(children[-1].name)
out("step", name=step.name, status=str(step.status), type=step.type)
ml.jobs.download(step.name, download_path="./dl", output_name="model")  # the step's output
out("download", text=[p.read_text() for p in pathlib.Path("dl").rglob("model.txt")])
ml.jobs.download(created.name, download_path="./dl-pipe", output_name="model")  # the pipeline's output
ml.jobs.download(created.name, download_path="./dl-pipe-all", all=True)
files = lambda root: sorted(str(p.relative_to(root)) for p in pathlib.Path(root).rglob("*") if p.is_file())
out("pipeline-download", named=files("dl-pipe"), all=files("dl-pipe-all"),
    text=pathlib.Path("dl-pipe/named-outputs/model/model.txt").read_text())

trial = command(
    command="python -c \"import mlflow; mlflow.log_metric('accuracy', 1 - abs(${{inputs.lr}} - 0.05))\"",
    environment=ENV,
    inputs={"lr": Uniform(min_value=0.01, max_value=0.1)},
    compute="pipe-cpu",
)
sweep = trial.sweep(primary_metric="accuracy", goal="maximize", sampling_algorithm="random")
sweep.set_limits(max_total_trials=3, max_concurrent_trials=2)
sweep.display_name = "sdk-sweep"
made = ml.jobs.create_or_update(sweep)
out("sweep-created", name=made.name, type=made.type)
out("sweep-stream", text=streamed(made.name))
swept = ml.jobs.get(made.name)
best = ml.jobs.get(swept.properties["best_child_run_id"])
out("sweep-done", status=str(swept.status), type=swept.type, metric=swept.objective.primary_metric,
    limits=swept.limits.max_total_trials, best=best.name, best_lr=float(best.inputs["lr"]._data),
    score=float(swept.properties["score"]))
trials = list(ml.jobs.list(parent_job_name=made.name))
out("trials", names=[t.name for t in trials], statuses=[str(t.status) for t in trials])
out("list", types={j.name: j.type for j in ml.jobs.list()})
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "arm-sdk-pipelines")


def _completed(status: str) -> bool:
    return status.upper().endswith("COMPLETED")


def test_sdk_pipeline_and_sweep_run_stream_and_list_their_children(
    srv: RunningServer, tmp_path: Path
) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.csv").write_text("a,b\n1,2\n")
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=500)}

    created = steps["created"]
    assert created["type"] == "pipeline", created
    log = steps["stream"]["text"]
    assert f"RunId: {created['name']}" in log and "Execution Summary" in log
    assert "step first" in log and "step second" in log and "Completed" in log, log
    done = steps["done"]
    assert _completed(done["status"]) and done["type"] == "pipeline", done
    assert done["steps"] == ["first", "second"] and done["display"] == "sdk-pipeline"
    assert str(done["compute"]).endswith("pipe-cpu")
    children = steps["children"]
    assert len(children["names"]) == 2 and children["displays"] == ["prep", "train"], children
    assert all(_completed(s) for s in children["statuses"]), children
    assert steps["step"]["name"] == children["names"][1] and _completed(steps["step"]["status"])
    assert steps["download"]["text"] == ["a,b\n1,2\nrows=7\n"], steps["download"]
    # The pipeline's own output (bound to the second step's): by name, and with all=True.
    piped = steps["pipeline-download"]
    assert piped["named"] == ["named-outputs/model/model.txt"], piped
    assert piped["text"] == "a,b\n1,2\nrows=7\n", piped
    assert "named-outputs/model/model.txt" in piped["all"], piped

    assert steps["sweep-created"]["type"] == "sweep"
    assert "trial" in steps["sweep-stream"]["text"]
    swept = steps["sweep-done"]
    assert _completed(swept["status"]) and swept["metric"] == "accuracy" and swept["limits"] == 3, swept
    trials = steps["trials"]
    assert len(trials["names"]) == 3 and all(_completed(s) for s in trials["statuses"]), trials
    assert swept["best"] in trials["names"] and 0.01 <= swept["best_lr"] <= 0.1
    assert swept["score"] == pytest.approx(1 - abs(swept["best_lr"] - 0.05))
    listed = steps["list"]["types"]  # jobs.list parses pipelines and sweeps; their children are theirs
    assert listed[created["name"]] == "pipeline" and listed[steps["sweep-created"]["name"]] == "sweep", listed
    assert not [
        name
        for name in listed
        if name.startswith((created["name"] + "-", steps["sweep-created"]["name"] + "-"))
    ], listed
