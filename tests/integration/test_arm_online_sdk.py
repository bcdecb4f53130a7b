"""The official azure-ai-ml SDK, unmodified, over HTTPS: online endpoints through the ARM facade
(api/arm/online_endpoints.py). ``online_endpoints.begin_create_or_update(ManagedOnlineEndpoint)``,
``online_deployments.begin_create_or_update(ManagedOnlineDeployment(model=Model(path=…),
code_configuration=…))`` (the model and code uploaded, the poller waiting for the real replica of
``azureml-inference-server-http``), ``endpoint.traffic = {"blue": 100}``, ``invoke``, ``get_keys``,
``begin_regenerate_keys``, ``get_logs``, ``get``/``list``, and ``begin_delete`` of the deployment
(once its traffic is 0) and the endpoints; an AMLToken endpoint's
``get_keys`` (a token) and ``invoke`` with it. The request bodies the SDK sent are kept by a
``raw_request_hook`` and checked against tests/data/arm_online/ (the recorded real bodies)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cloudlet.control.online_replicas import default_python
from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import served_for_inference

DATA = Path(__file__).parent.parent / "data" / "arm_online"
SCORE = """
import json, os
import joblib

def init():
    global model
    if os.environ.get("FAIL_INIT"):
        raise RuntimeError("init failed on purpose")
    # as on Azure: the registered folder ("model") lies under AZUREML_MODEL_DIR
    model = joblib.load(os.path.join(os.environ["AZUREML_MODEL_DIR"], "model", "model.pkl"))

def run(raw_data):
    print("scoring", raw_data, flush=True)
    return {"pred": model.predict(json.loads(raw_data)["data"]).tolist()}
"""
TRAIN = """
import sys, joblib
from sklearn.linear_model import LogisticRegression
X = [[0, 0], [0, 1], [1, 0], [1, 1], [5, 5], [5, 6], [6, 5], [6, 6]]
joblib.dump(LogisticRegression().fit(X, [0, 0, 0, 0, 1, 1, 1, 1]), sys.argv[1])
"""
INFERENCE_IMAGE = "mcr.microsoft.com/azureml/minimal-ubuntu22.04-py39-cpu-inference:latest"
SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient
from azure.ai.ml.entities import (CodeConfiguration, Environment, ManagedOnlineDeployment,
    ManagedOnlineEndpoint, Model, ProbeSettings)
from azure.core.exceptions import HttpResponseError
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("\nRESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

def hook(pipeline_request):
    request = pipeline_request.http_request
    if request.method in ("PUT", "POST", "PATCH") and "/onlineEndpoints" in request.url:
        body = request.body
        if isinstance(body, bytes):
            body = body.decode()
        path = request.url.split("/workspaces/", 1)[1].split("?", 1)[0]
        out("sent", method=request.method, path=path, body=json.loads(body) if body else None)

INFERENCE_IMAGE = "%s"
ml = MLClient.from_config(DefaultAzureCredential(), raw_request_hook=hook)
ep = ml.online_endpoints.begin_create_or_update(
    ManagedOnlineEndpoint(name="sdk-ep", auth_mode="key", description="from the SDK", tags={"t": "1"})
).result()
out("endpoint", state=ep.provisioning_state, scoring=ep.scoring_uri, auth=ep.auth_mode, traffic=ep.traffic)
# A registered environment (an inference image: nodes run no containers, so the replica runs on
# the node's inference interpreter, with a warning naming the image in its log).
ml.environments.create_or_update(Environment(name="sdk-inf", image=INFERENCE_IMAGE))
blue = ManagedOnlineDeployment(
    name="blue", endpoint_name="sdk-ep", model=Model(path="model"),
    code_configuration=CodeConfiguration(code="src", scoring_script="score.py"),
    environment="sdk-inf@latest",  # the SDK resolves the label (its Python form, no azureml:)
    instance_type="Standard_DS3_v2", instance_count=1,
    readiness_probe=ProbeSettings(initial_delay=1, period=1, failure_threshold=30),
)
made = ml.online_deployments.begin_create_or_update(blue).result()
out("deployment", state=made.provisioning_state, model=made.model, count=made.instance_count,
    type=made.instance_type, probe=made.readiness_probe.initial_delay, environment=made.environment)
bad = ManagedOnlineDeployment(
    name="bad", endpoint_name="sdk-ep", model=Model(path="model"),
    code_configuration=CodeConfiguration(code="src", scoring_script="score.py"),
    environment=Environment(image="python:3.11-slim"), environment_variables={"FAIL_INIT": "1"},
    instance_type="Standard_DS3_v2", instance_count=1,
)
try:
    ml.online_deployments.begin_create_or_update(bad).result()
    out("bad", raised=None)
except HttpResponseError as exc:
    out("bad", raised=str(exc))
ep = ml.online_endpoints.get("sdk-ep")
ep.traffic = {"blue": 100}
ep = ml.online_endpoints.begin_create_or_update(ep).result()
out("traffic", traffic=ep.traffic)
out("invoke", answer=json.loads(ml.online_endpoints.invoke(endpoint_name="sdk-ep", request_file="req.json")))
out("pinned", answer=json.loads(ml.online_endpoints.invoke(
    endpoint_name="sdk-ep", deployment_name="blue", request_file="req.json")))
keys = ml.online_endpoints.get_keys("sdk-ep")
ml.online_endpoints.begin_regenerate_keys("sdk-ep", key_type="primary").result()
after = ml.online_endpoints.get_keys("sdk-ep")
out("keys", changed=keys.primary_key != after.primary_key, same2=keys.secondary_key == after.secondary_key)
regen = ml.online_endpoints.invoke(endpoint_name="sdk-ep", request_file="req.json")
out("after-regen", answer=json.loads(regen))
out("logs", text=ml.online_deployments.get_logs(name="blue", endpoint_name="sdk-ep", lines=1000))
out("listed", endpoints=[e.name for e in ml.online_endpoints.list()],
    deployments=[d.name for d in ml.online_deployments.list(endpoint_name="sdk-ep")])
tok = ManagedOnlineEndpoint(name="tok-ep", auth_mode="aml_token")
tok = ml.online_endpoints.begin_create_or_update(tok).result()
token = ml.online_endpoints.get_keys("tok-ep")
out("token", auth=tok.auth_mode, kind=type(token).__name__, has=bool(token.access_token))
ep = ml.online_endpoints.get("sdk-ep")
ep.traffic = {"blue": 0}
ml.online_endpoints.begin_create_or_update(ep).result()
ml.online_deployments.begin_delete(name="blue", endpoint_name="sdk-ep").result()
out("deployment-deleted", deployments=[d.name for d in ml.online_deployments.list(endpoint_name="sdk-ep")])
missing = ManagedOnlineDeployment(
    name="missing", endpoint_name="sdk-ep", model=Model(path="model"),
    code_configuration=CodeConfiguration(code="src", scoring_script="score.py"),
    environment="azureml:sdk-inf:9", instance_type="Standard_DS3_v2", instance_count=1,
)
try:
    ml.online_deployments.begin_create_or_update(missing).result()
    out("missing", raised=None)
except HttpResponseError as exc:
    out("missing", raised=str(exc), status=exc.status_code)
ml.online_endpoints.begin_delete(name="sdk-ep").result()
ml.online_endpoints.begin_delete(name="tok-ep").result()
out("deleted", endpoints=[e.name for e in ml.online_endpoints.list()])
"""
pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served_for_inference(tmp_path_factory, "arm-online")


def test_sdk_online_endpoint(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    (tmp_path / "model").mkdir()
    subprocess.run([default_python(), "-c", TRAIN, str(tmp_path / "model" / "model.pkl")], check=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text(textwrap.dedent(SCORE))
    (tmp_path / "req.json").write_text(json.dumps({"data": [[0, 0], [6, 6]]}))
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    results = run_sdk(SDK_SCRIPT % INFERENCE_IMAGE, tmp_path, azureml_env(srv.cli_env()), timeout=380)
    sent = [r for r in results if r["step"] == "sent"]
    steps = {r["step"]: r for r in results if r["step"] != "sent"}

    ep = steps["endpoint"]
    assert (ep["state"], ep["auth"], ep["traffic"]) == ("Succeeded", "key", {}), ep
    assert ep["scoring"].startswith("https://"), ep
    assert "/online/" in ep["scoring"] and ep["scoring"].endswith("/sdk-ep/score"), ep
    made = steps["deployment"]
    assert made["state"] == "Succeeded" and made["count"] == 1 and made["probe"] == 1, made
    assert "/models/" in made["model"] and made["type"] == "Standard_DS3_v2", made
    # the registered environment's newest version, pinned (its ARM id), and used by the replica
    assert made["environment"].endswith("/environments/sdk-inf/versions/1"), made
    assert f"image {INFERENCE_IMAGE} requested" in steps["logs"]["text"], steps["logs"]
    # an unknown version: the PUT is a 400 naming the field the SDK sent, with the fix
    missing = steps["missing"]
    assert missing["status"] == 400 and "properties.environmentId" in missing["raised"], missing
    assert "cloudlet environment create" in missing["raised"], missing
    # a deployment whose init() fails: the poller raises with the reason, as ARM fails an operation
    # (its Azure-AsyncOperation answers Failed with an error), not "invalid status 'OK'" and a body
    raised = steps["bad"]["raised"]
    assert raised and raised.startswith("(DeploymentFailed) server_start failed"), steps["bad"]
    assert "init failed on purpose" in raised and "invalid status" not in raised, steps["bad"]
    assert steps["traffic"]["traffic"] == {"blue": 100}
    assert steps["invoke"]["answer"] == {"pred": [0, 1]}
    assert steps["pinned"]["answer"] == {"pred": [0, 1]}
    assert steps["keys"] == {"step": "keys", "changed": True, "same2": True}
    assert steps["after-regen"]["answer"] == {"pred": [0, 1]}  # the SDK fetched the new key
    assert "scoring" in steps["logs"]["text"], steps["logs"]
    assert steps["listed"] == {"step": "listed", "endpoints": ["sdk-ep"], "deployments": ["bad", "blue"]}
    assert steps["token"] == {"step": "token", "auth": "aml_token", "kind": "EndpointAuthToken", "has": True}
    assert steps["deployment-deleted"]["deployments"] == ["bad"]
    assert steps["deleted"]["endpoints"] == []

    # what the SDK sent has the shape of the recorded bodies (the unit tests translate those)
    puts = [s["body"] for s in sent if s["method"] == "PUT"]
    assert len(puts) == 7  # endpoint, blue, bad, traffic 100, tok-ep, traffic 0, missing
    for index, name in ((0, "endpoint_put"), (1, "deployment_put"), (3, "traffic_put")):
        assert _shape(puts[index]) == _shape(json.loads((DATA / f"{name}.json").read_text())), name
    assert _shape(puts[4]) == _shape(json.loads((DATA / "token_endpoint_put.json").read_text()))
    with srv.client() as api:
        arm = f"/subscriptions/{srv.subscription_id}/resourceGroups/default"
        arm += "/providers/Microsoft.MachineLearningServices/workspaces/default"
        refused = api.put(f"{arm}/onlineEndpoints/aad-ep", json={"properties": {"authMode": "AADToken"}})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["target"] == "properties.authMode", refused.text


WEIGHTS = ("traffic", "mirrorTraffic")


def _shape(body: Any) -> Any:
    """Keys and value types, not values (ids carry hashes and the test's subscription)."""
    if isinstance(body, dict):  # traffic maps are data (deployment → weight), not shape
        return {k: "weights" if k in WEIGHTS else _shape(v) for k, v in body.items()}
    if isinstance(body, list):
        return [_shape(v) for v in body]
    return type(body).__name__


LIGHT_SCORE = "def init():\n    pass\n\ndef run(raw_data):\n    return {'ok': True}\n"
SCALE_SCRIPT = r"""
import json
from azure.ai.ml import MLClient
from azure.ai.ml.entities import (CodeConfiguration, DefaultScaleSettings, ManagedOnlineDeployment, Model,
    ProbeSettings, TargetUtilizationScaleSettings)
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("\nRESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

def scale_of(deployment):
    s = deployment.scale_settings
    return {"kind": type(s).__name__, "min": getattr(s, "min_instances", None),
            "max": getattr(s, "max_instances", None), "polling": getattr(s, "polling_interval", None),
            "target": getattr(s, "target_utilization_percentage", None)}

def deployment(scale):
    return ManagedOnlineDeployment(
        name="auto", endpoint_name="scale-ep", model=Model(path="model"),
        code_configuration=CodeConfiguration(code="light", scoring_script="score.py"),
        instance_type="Standard_DS3_v2", instance_count=1, scale_settings=scale,
        readiness_probe=ProbeSettings(initial_delay=1, period=1, failure_threshold=60))

ml = MLClient.from_config(DefaultAzureCredential())
out("got", **scale_of(ml.online_deployments.get("auto", endpoint_name="scale-ep")))
target = TargetUtilizationScaleSettings(min_instances=1, max_instances=2, polling_interval=2,
                                        target_utilization_percentage=60)
try:
    ml.online_deployments.begin_create_or_update(deployment(target)).result()
    out("refused", raised=None)
except Exception as exc:  # the SDK's own check, before it sends the deployment's PUT
    out("refused", raised=f"{type(exc).__name__}: {exc}")
out("kept", **scale_of(ml.online_deployments.begin_create_or_update(deployment(None)).result()))
fixed = ml.online_deployments.begin_create_or_update(deployment(DefaultScaleSettings())).result()
out("fixed", **scale_of(fixed))
"""


def test_sdk_reads_autoscale_and_keeps_or_fixes_it(srv: RunningServer, tmp_path: Path) -> None:
    """Autoscale through the ARM facade: the SDK reads a deployment autoscaled in its document as
    ``TargetUtilizationScaleSettings``; it refuses to send one for a ManagedOnlineDeployment itself
    (client-side), so its update with ``scale_settings=None`` keeps the autoscale and with
    ``DefaultScaleSettings()`` makes the count fixed."""
    from cloudlet.client import MLClient as NativeClient

    sdk_python()
    for folder in ("light", "model"):
        (tmp_path / folder).mkdir()
    (tmp_path / "light" / "score.py").write_text(LIGHT_SCORE)
    (tmp_path / "model" / "weights.txt").write_text("1\n")
    scale = {
        "type": "target_utilization",
        "min_instances": 1,
        "max_instances": 2,
        "polling_interval": 2,
        "target_utilization_percentage": 60,
    }
    doc = {
        "name": "auto",
        "endpoint_name": "scale-ep",
        "model": {"path": "model"},
        "code_configuration": {"code": "light", "scoring_script": "score.py"},
        "instance_type": "Standard_DS3_v2",
        "instance_count": 1,
        "scale_settings": scale,
        "readiness_probe": {"initial_delay": 1, "period": 1, "failure_threshold": 60},
    }
    with NativeClient(home=srv.home) as native:
        native.online_endpoints.create_or_update({"name": "scale-ep", "auth_mode": "key"})
        made = native.online_deployments.create_or_update(doc, base_path=tmp_path)
        shown = native.online_deployments.wait("scale-ep", "auto", generation=made["generation"])
        assert shown["provisioning_state"] == "Succeeded", shown
        subprocess.run(
            [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
            env=srv.cli_env(),
            check=True,
            capture_output=True,
        )
        steps = {
            r["step"]: r for r in run_sdk(SCALE_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=300)
        }
        final = native.online_deployments.get("scale-ep", "auto")
        native.online_endpoints.delete("scale-ep")
    autoscaled = {"kind": "TargetUtilizationScaleSettings", "min": 1, "max": 2, "polling": 2, "target": 60}
    assert {k: v for k, v in steps["got"].items() if k != "step"} == autoscaled, steps["got"]
    refused = steps["refused"]["raised"]
    assert refused and "supports DefaultScaleSettings only" in refused, steps["refused"]
    assert {k: v for k, v in steps["kept"].items() if k != "step"} == autoscaled, steps["kept"]
    assert steps["fixed"]["kind"] == "DefaultScaleSettings", steps["fixed"]
    assert final["scale_settings"] == {"type": "default"}, final["scale_settings"]
