"""The OpenAPI document and the server agree (issue 24, defect 8): the cases schemathesis found,
each pinned (test_openapi_fuzz.py fuzzes the whole document)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import served

PROVIDER = "/providers/Microsoft.MachineLearningServices"
ARM = "/subscriptions/{sub}/resourceGroups/default" + PROVIDER + "/workspaces/default"
ARM_TEMPLATE = "/subscriptions/{sub}/resourceGroups/{rg}" + PROVIDER + "/workspaces/{ws}"
MLFLOW_ARTIFACTS = "/mlflow/v1.0" + ARM_TEMPLATE + "/api/2.0/mlflow-artifacts/artifacts"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "truth")


@pytest.fixture(scope="module")
def doc(srv: RunningServer) -> dict[str, Any]:
    document: dict[str, Any] = httpx.get(srv.endpoint + "/openapi.json").json()
    return document


def test_an_undeclared_method_on_a_literal_path_is_a_405_naming_its_methods(srv: RunningServer) -> None:
    mlflow = f"/mlflow/v1.0{ARM.format(sub=srv.subscription_id)}/api/2.0/mlflow"
    with srv.client() as api:
        # POST …/computes/{name}/nodes was the action route's 400 ('nodes' is not an action).
        nodes = api.post(f"{srv.ws_path}/computes/c1/nodes")
        assert nodes.status_code == 405, nodes.text
        assert nodes.headers["Allow"] == "GET"
        # OPTIONS …/logged-models/search listed {model_id}'s methods as well.
        search = api.options(f"{mlflow}/logged-models/search")
        assert search.status_code == 405
        assert search.headers["Allow"] == "POST"


def test_an_unparsable_mlflow_body_is_an_mlflow_error(srv: RunningServer) -> None:
    mlflow = f"/mlflow/v1.0{ARM.format(sub=srv.subscription_id)}/api/2.0/mlflow"
    with srv.client() as api:
        as_json = {"Content-Type": "application/json"}  # not UTF-8: FastAPI's own 400
        bad = api.post(f"{mlflow}/experiments/search", content=b"\xff\xfe", headers=as_json)
    assert bad.status_code == 400
    assert bad.json()["error_code"] == "INVALID_PARAMETER_VALUE"


def test_bounds_and_rules_are_the_servers(srv: RunningServer, doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    step = schemas["LogMetric"]["properties"]["step"]
    assert (step["minimum"], step["maximum"]) == (-(2**63), 2**63 - 1)  # was 9.223372036854776e18
    assert "pattern" in schemas["KeyValue"]["properties"]["key"]
    mlflow = f"/mlflow/v1.0{ARM.format(sub=srv.subscription_id)}/api/2.0/mlflow"
    with srv.client() as api:
        run = api.post(f"{mlflow}/runs/create", json={"experiment_id": "0"}).json()["run"]["info"]["run_id"]
        metric = {"run_id": run, "key": "m", "timestamp": 1, "step": 2**63 - 1}
        assert api.post(f"{mlflow}/runs/log-metric", json={**metric, "value": "1.5"}).status_code == 200
        assert api.post(f"{mlflow}/runs/log-metric", json={**metric, "value": "inf"}).status_code == 400
        assert api.post(f"{mlflow}/runs/create", json={"start_time": False}).status_code == 400
        # A whole number sent as a float is JSON Schema's integer; 1.5 is not.
        key = api.post("/api/v1/principals", json={"name": "truth-user"})
        assert key.status_code in (200, 201), key.text
        keys = "/api/v1/principals/truth-user/keys"
        assert api.post(keys, json={"expires_in_days": 3.0}).status_code in (200, 201)
        assert api.post(keys, json={"expires_in_days": 1.5}).status_code == 400


# -- what the fuzzing found once it reached real resources (issue 24's standing test) ----------
def test_an_arm_delete_answers_200_with_no_body_as_documented(
    srv: RunningServer, doc: dict[str, Any]
) -> None:
    arm = ARM.format(sub=srv.subscription_id)
    path = doc["paths"][ARM_TEMPLATE + "/environments/{name}/versions/{version}"]["delete"]
    assert path["responses"]["200"].get("content", {}) == {}  # was application/json
    with srv.client() as api:
        env = {"image": "python:3.11-slim"}
        made = api.put(f"{srv.ws_path}/environments/truth-env/versions/1", json=env)
        assert made.status_code in (200, 201), made.text
        gone = api.delete(f"{arm}/environments/truth-env/versions/1")
    assert (gone.status_code, gone.content) == (200, b"")


def test_documented_bounds_hold_on_mlflow_bodies(srv: RunningServer, doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    assert schemas["Finalize"]["properties"]["status"]["enum"] == [
        "LOGGED_MODEL_PENDING",
        "LOGGED_MODEL_READY",
        "LOGGED_MODEL_UPLOAD_FAILED",
    ]
    assert "anyOf" not in schemas["CreateModel"]["properties"]["source_run_id"]  # was string or null
    mlflow = f"/mlflow/v1.0{ARM.format(sub=srv.subscription_id)}/api/2.0/mlflow"
    with srv.client() as api:
        run = api.post(f"{mlflow}/runs/create", json={"experiment_id": "0"}).json()["run"]["info"]["run_id"]
        metric = {"run_id": run, "key": "m", "timestamp": 1, "step": 0}
        # a number in a string of 41 characters: the string form's maxLength (40) holds
        long = api.post(f"{mlflow}/runs/log-metric", json={**metric, "value": "0E" + "0" * 39})
        assert long.status_code == 400, long.text
        assert api.post(f"{mlflow}/runs/log-metric", json={**metric, "value": 0.5}).status_code == 200
        artifact = f"/mlflow/v1.0{ARM.format(sub=srv.subscription_id)}/api/2.0/mlflow-artifacts/artifacts"
        put = doc["paths"][f"{MLFLOW_ARTIFACTS}/{{path}}"]["put"]
        assert put["requestBody"]["required"] is False  # an empty artifact is a file
        assert api.put(f"{artifact}/{run}/empty.txt").status_code == 200
        shown = doc["paths"][f"{MLFLOW_ARTIFACTS}/{{path}}"]["get"]["responses"]["200"]["content"]
        assert "*/*" in shown  # the type it was uploaded with


def test_arm_scale_settings_must_be_an_object_that_says_something(
    srv: RunningServer, doc: dict[str, Any]
) -> None:
    put_body = doc["paths"][ARM_TEMPLATE + "/computes/{name}"]["put"]["requestBody"]["content"]
    identity = put_body["application/json"]["schema"]["properties"]["identity"]
    assert {"type": "null"} in identity["properties"]["type"]["anyOf"]  # null: as None, as taken
    computes = f"{ARM.format(sub=srv.subscription_id)}/computes/truth-cluster"
    with srv.client() as api:
        patch = api.patch(computes, json={"tags": {}, "properties": {"scaleSettings": {}}})
        assert patch.status_code == 400, patch.text
        assert patch.json()["error"]["target"] == "properties.scaleSettings"
        for nothing in ({"scaleSettings": None}, None):
            answer = api.patch(computes, json={"tags": {}, "properties": nothing})
            assert answer.status_code == 400, answer.text
        for scale in ([None], None):
            body = {"properties": {"computeType": "AmlCompute", "scaleSettings": scale}}
            put = api.put(computes, json=body)
            assert put.status_code == 400, put.text
            assert put.json()["error"]["target"] == "properties.scaleSettings"
        kind = api.put(computes, json={"identity": {"type": {}}, "properties": {"computeType": "AmlCompute"}})
        assert kind.status_code == 400, kind.text
        assert kind.json()["error"]["target"] == "identity.type"
        inner_null = {"properties": {"computeType": "AmlCompute", "properties": None}}
        put = api.put(computes, json=inner_null)
        assert put.status_code == 400, put.text
        assert put.json()["error"]["target"] == "properties.properties"
