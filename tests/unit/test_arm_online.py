"""api/arm/wire/arm_online.py: the bodies azure-ai-ml 1.35.2 really sent (tests/data/arm_online/, recorded
by tests/integration/test_arm_online_sdk.py's request hook) ↔ cloudlet's online documents."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cloudlet.api.arm.wire import arm_online
from cloudlet.domain.endpoints import online_endpoints as rules
from cloudlet.domain.errors import CloudletError
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.endpoints import online_endpoints as online_service
from cloudlet.store.schema import OnlineEndpoint

DATA = Path(__file__).parent.parent / "data" / "arm_online"
WS = (
    "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/default"
    "/providers/Microsoft.MachineLearningServices/workspaces/default"
)


def recorded(name: str) -> Any:
    return json.loads((DATA / name).read_text())


def test_endpoint_bodies_become_valid_documents() -> None:
    doc = arm_online.endpoint_from_arm(recorded("endpoint_put.json"), "sdk-ep")
    assert doc == {
        "name": "sdk-ep",
        "auth_mode": "key",
        "description": "from the SDK",
        "tags": {"t": "1"},
        "traffic": {},
        "mirror_traffic": {},
    }
    assert rules.parse_endpoint(doc, "sdk-ep").auth_mode == "key"
    traffic = arm_online.endpoint_from_arm(recorded("traffic_put.json"), "sdk-ep")
    assert traffic["traffic"] == {"blue": 100}
    token = arm_online.endpoint_from_arm(recorded("token_endpoint_put.json"), "tok-ep")
    assert rules.parse_endpoint(token, "tok-ep").auth_mode == "aml_token"


def test_endpoint_answer_has_what_the_sdk_reads() -> None:
    # The ARM door translates the native door's view (issue 26 item 2: one view per resource).
    spec = rules.parse_endpoint({"auth_mode": "aml_token", "traffic": {}}, "ep1").to_doc()
    row = OnlineEndpoint(
        name="ep1", spec=spec, provisioning_state="Succeeded", created_by="me", created_on=datetime.now(UTC)
    )
    ref = WorkspaceRef("00000000-0000-0000-0000-000000000000", "default", "default")
    view = online_service.render_endpoint(row, ref, "https://h:1")
    body = arm_online.endpoint_to_arm(view, WS, "local")
    props = body["properties"]
    assert body["id"] == f"{WS}/onlineEndpoints/ep1" == view["id"] and body["kind"] == "Managed"
    assert (props["authMode"], props["scoringUri"], props["provisioningState"]) == (
        "AMLToken",
        view["scoring_uri"],
        "Succeeded",
    )
    assert view["scoring_uri"].startswith("https://h:1/") and view["scoring_uri"].endswith("/ep1/score")
    assert props["swaggerUri"] == view["swagger_uri"] and props["properties"] == {}


def test_aad_token_is_refused_naming_the_field() -> None:
    with pytest.raises(CloudletError) as caught:
        arm_online.endpoint_from_arm({"properties": {"authMode": "AADToken"}}, "ep1")
    assert caught.value.target == "properties.authMode" and "Key or AMLToken" in caught.value.message


def test_patch_keeps_the_rest() -> None:
    current = {"name": "ep", "auth_mode": "key", "traffic": {"blue": 100}, "tags": {"a": "1"}}
    patched = arm_online.endpoint_patch({"tags": {"b": "2"}}, current)
    assert patched == {**current, "tags": {"b": "2"}}


def test_deployment_body_becomes_a_valid_document() -> None:
    doc = arm_online.deployment_from_arm(recorded("deployment_put.json"), "sdk-ep", "blue", "codes/abc")
    assert doc["model"].startswith("azureml:") and doc["model"].endswith(":1")
    assert doc["code_configuration"] == {"code": "codes/abc", "scoring_script": "score.py"}
    assert doc["environment"].startswith("azureml:CliV2AnonymousEnvironment:")
    assert (doc["instance_type"], doc["instance_count"]) == ("Standard_DS3_v2", 1)
    assert doc["readiness_probe"] == {"initial_delay": 1, "period": 1, "failure_threshold": 30}
    spec = rules.parse_deployment(doc, "sdk-ep", "blue")
    assert spec.readiness_probe["timeout"] == 2  # Azure's default filled in


def test_request_settings_and_probes_round_trip() -> None:
    body = {
        "sku": {"capacity": 2},
        "properties": {
            "model": f"{WS}/models/m/versions/3",
            "codeConfiguration": {"codeId": "x", "scoringScript": "s.py"},
            "instanceType": "Standard_DS3_v2",
            "requestSettings": {
                "requestTimeout": "PT10S",
                "maxQueueWait": "PT1S",
                "maxConcurrentRequestsPerInstance": 4,
            },
            "livenessProbe": {"initialDelay": "PT30S", "period": "PT5S", "successThreshold": 1},
        },
    }
    doc = arm_online.deployment_from_arm(body, "ep1", "dep", "codes/c")
    assert doc["request_settings"] == {
        "request_timeout_ms": 10000,
        "max_queue_wait_ms": 1000,
        "max_concurrent_requests_per_instance": 4,
    }
    spec = rules.parse_deployment(doc, "ep1", "dep").to_doc()
    back = arm_online.deployment_to_arm({**spec, "provisioning_state": "Creating"}, WS, "ep1", None, "local")
    props = back["properties"]
    assert props["model"] == f"{WS}/models/m/versions/3" and back["sku"]["capacity"] == 2
    assert props["requestSettings"] == {
        "requestTimeout": "PT10S",
        "maxQueueWait": "PT1S",
        "maxConcurrentRequestsPerInstance": 4,
    }
    assert props["livenessProbe"]["initialDelay"] == "PT30S" and props["provisioningState"] == "Creating"


def test_deployment_errors_name_the_arm_field() -> None:
    base = {"properties": {"codeConfiguration": {"scoringScript": "s.py"}}}
    with pytest.raises(CloudletError) as no_model:
        arm_online.deployment_from_arm(base, "ep1", "dep", "codes/c")
    assert no_model.value.target == "properties.model"
    with pytest.raises(CloudletError) as no_code:
        body = {
            "properties": {
                "model": f"{WS}/models/m/versions/1",
                "codeConfiguration": {"scoringScript": "s.py"},
            }
        }
        arm_online.deployment_from_arm(body, "ep1", "dep", None)
    assert no_code.value.target == "properties.codeConfiguration.codeId"
    # no codeConfiguration at all: an MLflow model's no-code deployment (the service checks the type)
    no_code_doc = arm_online.deployment_from_arm(
        {"properties": {"model": f"{WS}/models/m/versions/1"}}, "ep1", "dep", None
    )
    assert "code_configuration" not in no_code_doc and no_code_doc["model"] == "azureml:m:1"
    with pytest.raises(CloudletError) as kube:
        arm_online.deployment_from_arm(
            {"properties": {"endpointComputeType": "Kubernetes"}}, "ep1", "dep", None
        )
    assert kube.value.target == "properties.endpointComputeType"
    assert arm_online.arm_target("traffic.blue") == "properties.traffic.blue"
    assert arm_online.arm_target("instance_count") == "sku.capacity"


SCALE_BODY: dict[str, Any] = {
    "sku": {"capacity": 1},
    "properties": {
        "model": f"{WS}/models/m/versions/1",
        "codeConfiguration": {"scoringScript": "score.py"},
        "instanceType": "Standard_DS3_v2",
    },
}


def test_scale_settings_between_arm_and_the_document() -> None:
    """What a REST caller sends as ``scaleSettings`` (the SDK sends Default only for a managed
    deployment: it refuses TargetUtilization client-side) ↔ the native ``scale_settings``."""
    target = {
        "scaleType": "TargetUtilization",
        "minInstances": 1,
        "maxInstances": 3,
        "pollingInterval": "PT2S",
        "targetUtilizationPercentage": 60,
    }
    body = {**SCALE_BODY, "properties": {**SCALE_BODY["properties"], "scaleSettings": target}}
    doc = arm_online.deployment_from_arm(body, "ep1", "auto", "codes/c")
    assert doc["scale_settings"] == {
        "type": "target_utilization",
        "min_instances": 1,
        "max_instances": 3,
        "polling_interval": 2,
        "target_utilization_percentage": 60,
    }
    spec = rules.parse_deployment(doc, "ep1", "auto").to_doc()
    back = arm_online.deployment_to_arm(spec, WS, "ep1", None, "local")["properties"]
    assert back["scaleSettings"] == target
    assert json.loads(back["properties"]["cloudlet.scaleSettings"])["scale_in_delay"] == 60  # cloudlet's own
    # no scaleSettings keeps the stored autoscale (the SDK's scale_settings=None); Default is a fixed count
    assert (
        arm_online.deployment_from_arm(SCALE_BODY, "ep1", "auto", "codes/c", spec)["scale_settings"]
        == (spec["scale_settings"])
    )
    default = {
        **SCALE_BODY,
        "properties": {**SCALE_BODY["properties"], "scaleSettings": {"scaleType": "Default"}},
    }
    fixed = arm_online.deployment_from_arm(default, "ep1", "auto", "codes/c", spec)
    assert fixed["scale_settings"] == {"type": "default"}
    assert rules.parse_deployment(fixed, "ep1", "auto").scale_settings is None
    assert "scale_settings" not in arm_online.deployment_from_arm(SCALE_BODY, "ep1", "new", "codes/c")
    plain = arm_online.deployment_to_arm(
        rules.parse_deployment(fixed, "ep1", "auto").to_doc(), WS, "ep1", None, "l"
    )
    assert plain["properties"]["scaleSettings"] == {"scaleType": "Default"}
    assert "cloudlet.scaleSettings" not in plain["properties"]["properties"]


def test_scale_settings_errors_name_the_arm_field() -> None:
    wrong = {
        **SCALE_BODY,
        "properties": {**SCALE_BODY["properties"], "scaleSettings": {"scaleType": "Manual"}},
    }
    with pytest.raises(CloudletError) as kind:
        arm_online.deployment_from_arm(wrong, "ep1", "auto", "codes/c")
    assert kind.value.target == "properties.scaleSettings.scaleType"
    low = {"scaleType": "TargetUtilization", "minInstances": 3, "maxInstances": 2}
    body = {**SCALE_BODY, "properties": {**SCALE_BODY["properties"], "scaleSettings": low}}
    with pytest.raises(CloudletError) as bounds:
        rules.parse_deployment(arm_online.deployment_from_arm(body, "ep1", "auto", "codes/c"), "ep1", "auto")
    assert arm_online.arm_target(bounds.value.target) == "properties.scaleSettings.minInstances"


def test_a_deployment_writes_operation_fails_in_arms_shape() -> None:
    """What a deployment PUT's Azure-AsyncOperation answers: the SDK's poller raises a Failed
    status's ``error`` as HttpResponseError with that message."""
    assert arm_online.operation_status(2, "Updating", None, 2) == {"status": "InProgress"}
    assert arm_online.operation_status(2, "Succeeded", None, 2) == {"status": "Succeeded"}
    failed = arm_online.operation_status(2, "Failed", "server_start failed: init raised", 2)
    assert failed == {
        "status": "Failed",
        "error": {"code": "DeploymentFailed", "message": "server_start failed: init raised"},
    }
    assert arm_online.operation_status(3, "Succeeded", None, 2)["status"] == "Canceled"
    assert arm_online.operation_status(2, "Succeeded", None, 5)["status"] == "Failed"
