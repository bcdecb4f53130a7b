"""The real resources tests/integration/test_openapi_fuzz.py names in its requests, made by the
administrator before the fuzzing starts: MLflow runs, an experiment, an artifact and logged models;
a code snapshot and a code version; an online and a batch deployment (and one of each for DELETE
to remove); the fuzzing user's spare keys and two more users with roles. Each returns the values
the fuzz configuration maps path parameters and body fields to.

The online deployments are local ones (``?local=true``: no node, no core quota; the quota is 0),
one replica each of a scoring script that does nothing; the batch ones run only when invoked, on
the fuzz cluster that can never grow."""

from __future__ import annotations

import hashlib
import io
import tarfile
from typing import Any

import httpx

from tests.conftest import RunningServer
from tests.instance_helpers import new_user

PROVIDER = "/providers/Microsoft.MachineLearningServices"
ARM = "/subscriptions/{sub}/resourceGroups/default" + PROVIDER + "/workspaces/default"
MLFLOW = "/mlflow/v1.0" + ARM + "/api/2.0"
DOOMED, DOOMED_ARM = "fuzz-doomed", "fuzz-doomed-arm"  # what DELETE removes (one each API)
CODE, DEPLOYMENT = "fuzz-code", "fuzz-dpl"
SCHEDULE = "fuzz-schedule"
DATASTORE = "workspaceblobstore"
SCORE = b"def init():\n    pass\n\n\ndef run(raw_data):\n    return raw_data\n"
ARTIFACT = "fuzz.txt"
TAG = "fuzz-tag"


def _ok(answer: httpx.Response, *codes: int) -> Any:
    assert answer.status_code in (codes or (200,)), f"{answer.request.url}: {answer.text}"
    return answer.json() if answer.content else None


def tracking(srv: RunningServer, api: httpx.Client) -> dict[str, str]:
    """An experiment with a run (another of each for delete, update and restore), an artifact of
    the run's and a logged model with a tag (another to delete)."""
    mlflow = MLFLOW.format(sub=srv.subscription_id)
    found: dict[str, str] = {}
    for prefix, name in (("", "fuzz-experiment"), ("doomed_", DOOMED)):
        made = _ok(api.post(f"{mlflow}/mlflow/experiments/create", json={"name": name}))
        found[f"{prefix}experiment_id"] = made["experiment_id"]
        found[f"{prefix}experiment_name"] = name
        run = _ok(api.post(f"{mlflow}/mlflow/runs/create", json={"experiment_id": made["experiment_id"]}))
        found[f"{prefix}run_id"] = run["run"]["info"]["run_id"]
    found["artifact"] = f"{found['run_id']}/{ARTIFACT}"
    _ok(api.put(f"{mlflow}/mlflow-artifacts/artifacts/{found['artifact']}", content=b"fuzz\n"))
    for prefix in ("", "doomed_"):
        body = {"experiment_id": found["experiment_id"], "source_run_id": found["run_id"], "name": "fuzz"}
        model = _ok(api.post(f"{mlflow}/mlflow/logged-models", json=body))["model"]
        found[f"{prefix}model_id"] = model["info"]["model_id"]
    tags = {"tags": [{"key": TAG, "value": "1"}]}
    _ok(api.patch(f"{mlflow}/mlflow/logged-models/{found['model_id']}/tags", json=tags))
    return found


def _tarball(name: str, content: bytes) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return raw.getvalue()


def code_and_deployments(
    srv: RunningServer, api: httpx.Client, cluster: str, model: str, online: str, batch: str
) -> dict[str, str]:
    """A code snapshot (``codes/<sha256>``) of a scoring script that does nothing, a code version
    of the same folder uploaded to the datastore, and online and batch deployments of it."""
    packed = _tarball("score.py", SCORE)
    digest = hashlib.sha256(packed).hexdigest()
    _ok(api.put(f"{srv.ws_path}/codes/{digest}", content=packed), 200, 201)
    _ok(api.put(f"{srv.ws_path}/datastores/{DATASTORE}/paths/{CODE}", content=packed), 201)
    arm = ARM.format(sub=srv.subscription_id)
    uri = {"codeUri": f"azureml://datastores/{DATASTORE}/paths/{CODE}"}
    _ok(api.put(f"{arm}/codes/{CODE}/versions/1", json={"properties": uri}), 200, 201)
    common = {
        "model": f"azureml:{model}:1",
        "code_configuration": {"code": f"codes/{digest}", "scoring_script": "score.py"},
    }
    for name in (DEPLOYMENT, DOOMED, DOOMED_ARM):
        on_line = {**common, "name": name, "instance_type": "Standard_DS3_v2", "instance_count": 1}
        path = f"{srv.ws_path}/onlineEndpoints/{online}/deployments/{name}"
        _ok(api.put(path, json=on_line, params={"local": "true"}), 200, 201, 202)
        in_batch = {**common, "name": name, "compute": f"azureml:{cluster}"}
        _ok(api.put(f"{srv.ws_path}/batchEndpoints/{batch}/deployments/{name}", json=in_batch), 200, 201, 202)
    default = {"name": batch, "defaults": {"deployment_name": DEPLOYMENT}}
    _ok(api.put(f"{srv.ws_path}/batchEndpoints/{batch}", json=default), 200, 201, 202)
    return {"digest": digest, "code": CODE, "deployment": DEPLOYMENT}


def access(srv: RunningServer, api: httpx.Client, fuzzer: str) -> dict[str, str]:
    """Two spare keys of the fuzzing user's (one to rotate, one to revoke: never the key it fuzzes
    with) and two users with a role (one to change, one to remove)."""
    keys = [_ok(api.post(f"/api/v1/principals/{fuzzer}/keys"), 201)["id"] for _ in range(2)]
    for user in ("fuzz-reader", DOOMED):
        new_user(api, srv, user, "Reader")
    return {"key_id": str(keys[0]), "doomed_key_id": str(keys[1]), "principal": "fuzz-reader"}


TEAM = "fuzz-team"


def teams(api: httpx.Client) -> dict[str, str]:
    """A team for the operations that name one, and another for DELETE to remove (issue 31)."""
    for name in (TEAM, DOOMED):
        _ok(api.put(f"/api/v1/teams/{name}", json={"shares": [{"location": "local", "share": 1}]}), 201)
    return {"team": TEAM}


def schedules(srv: RunningServer, api: httpx.Client, cluster: str) -> dict[str, str]:
    """A job schedule for the operations that name one (disabled: it never fires during the run),
    and one for each API's DELETE to remove."""
    job = {"type": "command", "command": "true", "compute": f"azureml:{cluster}"}
    for name in (SCHEDULE, DOOMED, DOOMED_ARM):
        body = {
            "trigger": {"type": "cron", "expression": "0 3 * * *"},
            "create_job": job,
            "is_enabled": False,
        }
        _ok(api.put(f"{srv.ws_path}/schedules/{name}", json=body), 201)
    return {"schedule": SCHEDULE}
