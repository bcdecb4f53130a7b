"""Acceptance (issue 13, item 3): a real job on a real agent logs with the real MLflow client to
cloudlet's tracking API, and its metrics, params and artifacts show in ``cloudlet job show``, the
native job view and ``MlflowClient`` (get_run, get_metric_history, list and download artifacts).
A Reader cannot log; a job's token cannot write another job's run. And the MLflow client's own
calls beyond a job: experiments, runs, search, batches, tags, errors in MLflow's shape."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

mlflow = pytest.importorskip("mlflow")
from mlflow.entities import LoggedModelStatus, Metric, Param, RunTag  # noqa: E402
from mlflow.exceptions import MlflowException  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from cloudlet.client import MLClient as CloudletClient  # noqa: E402
from tests.azureml_helpers import azureml_env, run_sdk  # noqa: E402
from tests.conftest import RunningServer  # noqa: E402
from tests.instance_helpers import new_user  # noqa: E402
from tests.jobs_helpers import log_text, served, submit, wait_job  # noqa: E402

SCRIPT = textwrap.dedent(
    """
    import os, sys, types, mlflow
    from mlflow.models import Model
    from mlflow.tracking import MlflowClient

    def tiny_flavor():
        # a model flavor of a few lines: MLflow's log_model path without a framework
        flavor = types.ModuleType("tiny_flavor")
        def save_model(path, mlflow_model=None, **kwargs):
            os.makedirs(path)
            with open(os.path.join(path, "weights.txt"), "w") as f:
                f.write("w=1")
            mlflow_model.add_flavor("tiny_flavor", weights="weights.txt")
            mlflow_model.save(os.path.join(path, "MLmodel"))
        flavor.save_model = save_model
        sys.modules["tiny_flavor"] = flavor
        return flavor

    with mlflow.start_run() as run:
        assert run.info.run_id == os.environ["CLOUDLET_JOB"], run.info.run_id
        mlflow.log_param("lr", "0.01")
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
        with open("notes.txt", "w") as f:
            f.write("hello from the job")
        mlflow.log_artifact("notes.txt")
        mlflow.log_dict({"layers": 3}, "config/model.json")
        mlflow.log_text("some text", "text/readme.txt")
        model = Model.log(artifact_path="model", flavor=tiny_flavor())
        print("MODEL", model.model_id)
        try:
            MlflowClient().log_metric(os.environ["OTHER_JOB"], "stolen", 1.0)
            print("OTHER-RUN-WRITTEN")
        except Exception as exc:
            print("OTHER-RUN-REFUSED", getattr(exc, "error_code", exc))
    # The tracking token is no user credential: cloudlet's own API refuses it.
    import urllib.error, urllib.request
    base = os.environ["MLFLOW_TRACKING_URI"].split("/mlflow/")[0]
    token = os.environ["MLFLOW_TRACKING_TOKEN"]
    request = urllib.request.Request(base + "/api/v1/whoami", headers={"Authorization": "Bearer " + token})
    try:
        urllib.request.urlopen(request)
        print("TOKEN-OPENS-THE-API")
    except urllib.error.HTTPError as exc:
        print("TOKEN-API", exc.code)
    print("TRACKED", os.environ["MLFLOW_EXPERIMENT_NAME"])
    """
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "mlflow")


def tracking_uri(srv: RunningServer) -> str:
    return (
        f"{srv.endpoint}/mlflow/v1.0/subscriptions/{srv.subscription_id}/resourceGroups/default"
        "/providers/Microsoft.MachineLearningServices/workspaces/default"
    )


@pytest.fixture
def client(srv: RunningServer, monkeypatch: pytest.MonkeyPatch) -> MlflowClient:
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", srv.api_key)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri(srv))  # models:/ URIs resolve through it
    return MlflowClient(tracking_uri=tracking_uri(srv))


@pytest.fixture(scope="module")
def tracked_job(srv: RunningServer) -> str:
    with srv.client() as api:
        submit(api, srv, "mlf-other", {"command": "true", "compute": "local"})
        submit(
            api,
            srv,
            "mlf-train",
            {
                "command": f"python - <<'EOF'\n{SCRIPT}\nEOF",
                "compute": "local",
                "experiment_name": "mlf-exp",
                "environment_variables": {"OTHER_JOB": "mlf-other"},
            },
        )
        done = wait_job(api, srv, "mlf-train", timeout=120)
        log = log_text(api, srv, "mlf-train")
        assert done["status"] == "Completed", log
        assert "OTHER-RUN-REFUSED PERMISSION_DENIED" in log and "TRACKED mlf-exp" in log, log
        assert "TOKEN-API 401" in log, log
        wait_job(api, srv, "mlf-other", timeout=60)
    return "mlf-train"


def test_a_jobs_metrics_in_job_show_and_the_mlflow_client(
    srv: RunningServer, tracked_job: str, client: MlflowClient, tmp_path: Path
) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "cloudlet", "job", "show", "-n", tracked_job, "-o", "json"],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    view = json.loads(shown.stdout)
    assert view["metrics"] == {"loss": 0.2} and view["params"] == {"lr": "0.01"}
    table = subprocess.run(
        [sys.executable, "-m", "cloudlet", "job", "show", "-n", tracked_job, "-o", "table"],
        env=srv.cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "loss" in table.stdout and "0.2" in table.stdout, table.stdout

    run = client.get_run(tracked_job)
    assert run.info.run_id == tracked_job and run.info.status == "FINISHED"
    assert run.data.metrics == {"loss": 0.2} and run.data.params == {"lr": "0.01"}
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.name == "mlf-exp"
    history = client.get_metric_history(tracked_job, "loss")
    assert [(m.step, m.value) for m in history] == [(i, 1.0 / (i + 1)) for i in range(5)]

    listed = {f.path: f.is_dir for f in client.list_artifacts(tracked_job)}
    assert {"notes.txt": False, "config": True, "text": True}.items() <= listed.items(), listed
    assert [f.path for f in client.list_artifacts(tracked_job, "config")] == ["config/model.json"]
    local = client.download_artifacts(tracked_job, "notes.txt", str(tmp_path))
    assert Path(local).read_text() == "hello from the job"
    folder = client.download_artifacts(tracked_job, "config", str(tmp_path))
    assert json.loads((Path(folder) / "model.json").read_text()) == {"layers": 3}
    # A model logged in the job (MLflow 3's logged models): found by the run and by its id.
    (tmp_path / "m").mkdir()
    model = mlflow.artifacts.download_artifacts(f"runs:/{tracked_job}/model", dst_path=str(tmp_path / "m"))
    assert (Path(model) / "weights.txt").read_text() == "w=1" and (Path(model) / "MLmodel").exists()
    [logged] = client.search_logged_models([run.info.experiment_id], filter_string="name = 'model'")
    assert logged.source_run_id == tracked_job and logged.status == LoggedModelStatus.READY
    assert [o.model_id for o in client.get_run(tracked_job).outputs.model_outputs] == [logged.model_id]
    # The run's artifacts are the job's default artifacts folder (its attempts' outputs and logs).
    assert "attempt-1" in listed and "mlf-other" not in client.get_run("mlf-other").data.params


def test_a_reader_reads_but_cannot_log(
    srv: RunningServer, tracked_job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with srv.client() as api:
        key = new_user(api, srv, "mlf-reader", "Reader")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", key)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    reader = MlflowClient(tracking_uri=tracking_uri(srv))
    assert reader.get_run(tracked_job).data.params == {"lr": "0.01"}
    with pytest.raises(MlflowException) as refused:
        reader.log_metric(tracked_job, "loss", 9.0)
    assert refused.value.error_code == "PERMISSION_DENIED"
    with pytest.raises(MlflowException) as refused:
        reader.create_experiment("mlf-reader-exp")
    assert refused.value.error_code == "PERMISSION_DENIED"
    assert reader.get_run(tracked_job).data.metrics == {"loss": 0.2}


def test_experiments_runs_and_search(client: MlflowClient) -> None:
    experiment_id = client.create_experiment("mlf-search", tags={"team": "vision"})
    with pytest.raises(MlflowException) as taken:
        client.create_experiment("mlf-search")
    assert taken.value.error_code == "RESOURCE_ALREADY_EXISTS"
    assert client.get_experiment_by_name("mlf-nothing") is None
    got = client.get_experiment_by_name("mlf-search")
    assert got is not None and got.experiment_id == experiment_id and got.tags == {"team": "vision"}
    runs = []
    for i, lr in enumerate(("0.1", "0.01", "0.001")):
        run = client.create_run(experiment_id, run_name=f"trial-{i}")
        client.log_batch(
            run.info.run_id,
            metrics=[Metric("acc", 0.5 + i / 10, 1000 + s, s) for s in range(3)],
            params=[Param("lr", lr)],
            tags=[RunTag("kind", "trial")],
        )
        runs.append(run.info.run_id)
    client.set_terminated(runs[0], "FAILED")
    best = client.search_runs([experiment_id], "metrics.acc > 0.55", order_by=["metrics.acc DESC"])
    assert [r.info.run_id for r in best] == [runs[2], runs[1]]
    failed = client.search_runs([experiment_id], "attributes.status = 'FAILED' and params.lr = '0.1'")
    assert [r.info.run_id for r in failed] == [runs[0]]
    page = client.search_runs([experiment_id], max_results=2)
    assert len(page) == 2 and page.token
    assert len(client.search_runs([experiment_id], max_results=2, page_token=page.token)) == 1
    with pytest.raises(MlflowException) as bad:
        client.search_runs([experiment_id], "metrics.acc >> 1")
    assert bad.value.error_code == "INVALID_PARAMETER_VALUE"
    with pytest.raises(MlflowException) as changed:
        client.log_param(runs[1], "lr", "0.5")
    assert changed.value.error_code == "INVALID_PARAMETER_VALUE" and "already logged" in changed.value.message
    client.set_tag(runs[1], "note", "x")
    client.delete_tag(runs[1], "note")
    assert "note" not in client.get_run(runs[1]).data.tags
    client.delete_run(runs[1])
    assert [r.info.run_id for r in client.search_runs([experiment_id])] == [runs[2], runs[0]]
    client.restore_run(runs[1])
    client.rename_experiment(experiment_id, "mlf-search-2")
    assert client.get_experiment(experiment_id).name == "mlf-search-2"
    names = [e.name for e in client.search_experiments(filter_string="name LIKE 'mlf-search%'")]
    assert names == ["mlf-search-2"]
    client.delete_experiment(experiment_id)
    assert client.get_experiment(experiment_id).lifecycle_stage == "deleted"
    with pytest.raises(MlflowException) as missing:
        client.get_run("no-such-run")
    assert missing.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_errors_answer_in_mlflows_shape(srv: RunningServer) -> None:
    base = tracking_uri(srv) + "/api/2.0/mlflow"
    anonymous = httpx.get(f"{base}/runs/get?run_id=x", timeout=30)
    assert anonymous.status_code == 401 and anonymous.json()["error_code"] == "UNAUTHENTICATED"
    forged = httpx.get(
        f"{base}/runs/get?run_id=x", headers={"Authorization": "Bearer clm_e30.bad"}, timeout=30
    )
    assert forged.status_code == 401
    with srv.client() as api:
        missing = api.post(f"{base}/runs/log-metric", json={"run_id": "mlf-train"})
        assert missing.status_code == 400 and missing.json()["error_code"] == "INVALID_PARAMETER_VALUE"
        assert "key" in missing.json()["message"]
        outside = api.get(f"{tracking_uri(srv)}/api/2.0/mlflow-artifacts/artifacts/mlf-train/..%2F..%2Fx")
        assert outside.status_code in (400, 404), outside.text


WORKSPACE_SCRIPT = """
import json
from azure.ai.ml import MLClient
from azure.identity import DefaultAzureCredential
ml = MLClient.from_config(DefaultAzureCredential())
print("RESULT " + json.dumps({"uri": ml.workspaces.get(ml.workspace_name).mlflow_tracking_uri}))
"""


def test_the_sdks_mlflow_tracking_uri_serves_plain_mlflow(
    srv: RunningServer, tracked_job: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ml_client.workspaces.get(...).mlflow_tracking_uri`` is this workspace's tracking API on the
    TLS listener: the plain MLflow client reads the job's run through it."""
    env = azureml_env(srv.cli_env())
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    [result] = run_sdk(WORKSPACE_SCRIPT, tmp_path, env)
    uri = result["uri"]
    assert uri == tracking_uri(srv).replace(srv.endpoint, srv.https_url), uri
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", srv.api_key)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", srv.ca_file)
    assert MlflowClient(tracking_uri=uri).get_run(tracked_job).data.metrics == {"loss": 0.2}


def test_workspace_show_gives_the_mlflow_tracking_uri(
    srv: RunningServer, tracked_job: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cloudlet workspace show --query mlflow_tracking_uri -o tsv``, as Azure ML users read it
    from ``az ml workspace show``: the same URI the SDK gets, and plain MLflow reads through it."""
    args = ["workspace", "show", "--query", "mlflow_tracking_uri", "-o", "tsv"]
    shown = subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert shown == tracking_uri(srv).replace(srv.endpoint, srv.https_url), shown
    with srv.client() as api:
        listed = api.get("/api/v1/workspaces").json()["value"]
    assert [w["mlflow_tracking_uri"] for w in listed if w["name"] == "default"] == [shown]
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", srv.api_key)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", srv.ca_file)
    assert MlflowClient(tracking_uri=shown).get_run(tracked_job).data.metrics == {"loss": 0.2}


def test_a_runs_status_follows_its_job(srv: RunningServer, client: MlflowClient) -> None:
    """Failed ⇒ FAILED (whatever the script's MLflow said), Canceled ⇒ KILLED, and the client
    library's job carries the metrics too."""
    logs_then_fails = "python -c \"import mlflow; mlflow.log_metric('seen', 1.0)\" && exit 3"
    with srv.client() as api:
        submit(api, srv, "mlf-fails", {"command": logs_then_fails, "compute": "local"})
        submit(api, srv, "mlf-canceled", {"command": "sleep 60", "compute": "local"})
        wait_job(api, srv, "mlf-canceled", ("Running",), timeout=60)
        assert client.get_run("mlf-canceled").info.status == "RUNNING"
        assert api.post(f"{srv.ws_path}/jobs/mlf-canceled/cancel").status_code in (200, 202)
        assert wait_job(api, srv, "mlf-fails", timeout=60)["status"] == "Failed"
        assert wait_job(api, srv, "mlf-canceled", timeout=60)["status"] == "Canceled"
    failed = client.get_run("mlf-fails")
    assert failed.info.status == "FAILED" and failed.data.metrics == {"seen": 1.0} and failed.info.end_time
    assert client.get_run("mlf-canceled").info.status == "KILLED"
    with CloudletClient(srv.api_key, srv.subscription_id, "default", "default", endpoint=srv.endpoint) as ml:
        assert ml.jobs.get("mlf-fails").metrics == {"seen": 1.0}
