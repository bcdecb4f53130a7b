"""Command jobs through the official azure-ai-ml SDK, unmodified, over HTTPS, pointed at cloudlet
only by ``cloudlet azureml env`` and ``config.json``: a job with local code, a local data input,
a model input (a model the SDK registered) and an output on a cluster → ``jobs.stream`` prints
its log → Completed → ``jobs.download`` returns the output and the default artifacts; a
serverless job (no compute: the workspace's default instance type); ``begin_cancel``. One SDK
process, as a user's notebook would run."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import served
from tests.studio_http import sign_in, studio_client

SDK_SCRIPT = r"""
import contextlib, io, json
from pathlib import Path
from azure.ai.ml import Input, MLClient, Output, command
from azure.ai.ml.entities import AmlCompute, Model
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}), flush=True)

def streamed(name):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        ml.jobs.stream(name)
    return buf.getvalue()

ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"
ml = MLClient.from_config(DefaultAzureCredential())
ml.compute.begin_create_or_update(
    AmlCompute(name="sdk-cpu", size="Standard_DS3_v2", min_instances=0, max_instances=1,
               idle_time_before_scale_down=300)
).result()

model = ml.models.create_or_update(Model(name="sdk-model", path="./model", type="mlflow_model"))
out("model", name=model.name, version=model.version)

job = command(
    code="./src",
    command="python main.py --data ${{inputs.data}} --model ${{inputs.model}} --out ${{outputs.result}}",
    inputs={"data": Input(type="uri_folder", path="./data"),
            "model": Input(type="mlflow_model", path="azureml:sdk-model:1")},
    outputs={"result": Output(type="uri_folder")},
    environment=ENV,
    compute="sdk-cpu",
    display_name="sdk-train",
    experiment_name="sdk-tests",
)
created = ml.jobs.create_or_update(job)
out("created", name=created.name, status=str(created.status), studio=created.studio_url)
out("stream", text=streamed(created.name))
done = ml.jobs.get(created.name)
out("done", status=str(done.status), display=done.display_name, compute=done.compute,
    studio=done.studio_url)
ml.jobs.download(created.name, download_path="./dl", output_name="result")
ml.jobs.download(created.name, download_path="./dl-all", all=True)
files = lambda root: sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file())
out("download", result=files("dl"), all=files("dl-all"),
    text=Path("dl/named-outputs/result/result.txt").read_text())
listed = [j.name for j in ml.jobs.list()]
out("list", names=listed)

serverless = ml.jobs.create_or_update(command(command="echo serverless-ok", environment=ENV))
out("serverless", text=streamed(serverless.name), status=str(ml.jobs.get(serverless.name).status),
    compute=serverless.compute)

sleeper = ml.jobs.create_or_update(command(command="sleep 300", environment=ENV, compute="sdk-cpu"))
ml.jobs.begin_cancel(sleeper.name).result()
out("cancel", status=str(ml.jobs.get(sleeper.name).status))
"""

MAIN_PY = """
import argparse, pathlib
parser = argparse.ArgumentParser()
parser.add_argument("--data")
parser.add_argument("--model")
parser.add_argument("--out")
args = parser.parse_args()
rows = (pathlib.Path(args.data) / "rows.csv").read_text().splitlines()
print(f"read {len(rows)} rows from the data input")
print("model flavor:", (pathlib.Path(args.model) / "MLmodel").read_text().strip())
pathlib.Path(args.out, "result.txt").write_text(f"rows={len(rows)}\\n")
pathlib.Path("outputs", "note.txt").write_text("kept as a default artifact\\n")
print("training done")
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "arm-sdk-jobs")


def test_sdk_runs_streams_downloads_serverless_and_cancels(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text(MAIN_PY)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "MLmodel").write_text("flavors: sklearn\n")
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=400)}

    created = steps["created"]
    assert created["status"] in ("Queued", "JobStatus.QUEUED", "Preparing", "Starting"), created
    # The job's studio page on this server (services.Studio), not the Azure portal's; the SDK
    # appends the token's tenant ("&tid=…"), which the page takes and ignores.
    page = f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default/jobs/{created['name']}"
    assert created["studio"].startswith(f"{page}?tab=overview&tid="), created
    with studio_client(srv) as browser:
        assert sign_in(browser, srv.api_key).status_code == 303
        opened = browser.get(created["studio"])
        assert opened.status_code == 200 and created["name"] in opened.text
    log = steps["stream"]["text"]
    assert f"RunId: {created['name']}" in log
    assert "read 3 rows from the data input" in log and "training done" in log
    assert "model flavor: flavors: sklearn" in log  # the registered model, mounted as the input
    assert steps["model"] == {"step": "model", "name": "sdk-model", "version": "1"}
    assert steps["done"]["status"].endswith("COMPLETED") or steps["done"]["status"] == "Completed"
    assert steps["done"]["display"] == "sdk-train" and steps["done"]["compute"].endswith("sdk-cpu")
    assert steps["done"]["studio"] == created["studio"]  # jobs.get too
    download = steps["download"]
    assert download["result"] == ["named-outputs/result/result.txt"] and download["text"] == "rows=3\n"
    assert any(p.endswith("outputs/note.txt") for p in download["all"]), download["all"]
    assert "named-outputs/result/result.txt" in download["all"], download["all"]  # all=True: outputs too
    assert any(p.endswith("std_log.txt") for p in download["all"]), download["all"]
    assert created["name"] in steps["list"]["names"]
    serverless = steps["serverless"]
    assert "serverless-ok" in serverless["text"] and serverless["status"].upper().endswith("COMPLETED")
    assert steps["cancel"]["status"].upper().endswith("CANCELED")
