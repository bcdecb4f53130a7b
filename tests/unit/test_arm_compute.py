"""ARM compute bodies (what azure-ai-ml sends) to native compute documents and back (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request

from cloudlet.api import arm
from cloudlet.api.arm.wire import arm_compute
from cloudlet.domain.compute.compute_spec import parse_compute
from cloudlet.domain.errors import CloudletError

# Bodies as azure-ai-ml 1.35.2 sends them (docs: ../shared/AZURE-ML-API.md).
AML_BODY: dict[str, Any] = {
    "location": "eastus",
    "properties": {
        "computeType": "AmlCompute",
        "disableLocalAuth": True,
        "properties": {
            "vmSize": "STANDARD_DS3_v2",
            "vmPriority": "LowPriority",
            "scaleSettings": {"maxNodeCount": 2, "minNodeCount": 0, "nodeIdleTimeBeforeScaleDown": "PT2M"},
            "remoteLoginPortPublicAccess": "NotSpecified",
            "enableNodePublicIp": True,
            "osType": "Linux",
        },
    },
}
CI_BODY: dict[str, Any] = {
    "location": "local",
    "properties": {
        "computeType": "ComputeInstance",
        "properties": {
            "vmSize": "Standard_DS3_v2",
            "idleTimeBeforeShutdown": "PT30M",
            "enableNodePublicIp": True,
            "enableSSO": True,
            "enableRootAccess": False,
            "releaseQuotaOnStop": False,
            "enableOSPatching": False,
            "applicationSharingPolicy": "Shared",
            "computeInstanceAuthorizationType": "personal",
            "schedules": {
                "computeStartStop": [
                    {
                        "action": "Stop",
                        "triggerType": "Cron",
                        "cron": {"expression": "0 18 * * *", "timeZone": "UTC"},
                        "status": "Enabled",
                    }
                ]
            },
        },
    },
}


def test_aml_compute_body_becomes_a_valid_native_document() -> None:
    doc = arm_compute.from_arm(AML_BODY, "cpu")
    assert doc == {
        "name": "cpu",
        "type": "amlcompute",
        "location": "eastus",
        "size": "STANDARD_DS3_v2",
        "tier": "LowPriority",
        "min_instances": 0,
        "max_instances": 2,
        "idle_time_before_scale_down": 120,
        "enable_node_public_ip": True,
    }
    spec = parse_compute(doc)
    assert spec.tier == "low_priority"  # type: ignore[union-attr]


def test_compute_instance_body_becomes_a_valid_native_document() -> None:
    doc = arm_compute.from_arm(CI_BODY, "ci")
    assert doc["enable_root_access"] is False and doc["idle_time_before_shutdown"] == "PT30M"
    assert doc["schedules"]["compute_start_stop"][0] == {
        "action": "stop",
        "trigger": {"type": "cron", "expression": "0 18 * * *", "time_zone": "UTC"},
        "state": "enabled",
    }
    spec = parse_compute(doc)
    assert spec.idle_time_before_shutdown_minutes == 30  # type: ignore[union-attr]


def test_a_body_without_size_gets_the_default_natively() -> None:
    body = {"properties": {"computeType": "AmlCompute", "properties": {}}}
    assert parse_compute(arm_compute.from_arm(body, "minimal")).size == "Standard_DS3_v2"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "target"),
    [
        ({"properties": {"computeType": "Databricks"}}, "properties.computeType"),
        ({"properties": {}}, "properties.computeType"),
        ([], "$"),
        ({"properties": {"computeType": "AmlCompute", "properties": []}}, "properties.properties"),
        (
            {
                "properties": {
                    "computeType": "AmlCompute",
                    "properties": {"scaleSettings": {"nodeIdleTimeBeforeScaleDown": "2m"}},
                }
            },
            "properties.properties.scaleSettings.nodeIdleTimeBeforeScaleDown",
        ),
        (
            {
                "properties": {
                    "computeType": "ComputeInstance",
                    "properties": {"setupScripts": {"scripts": {}}},
                }
            },
            "properties.properties.setupScripts",
        ),
    ],
)
def test_bad_bodies_name_the_arm_field(body: Any, target: str) -> None:
    with pytest.raises(CloudletError) as info:
        arm_compute.from_arm(body, "x")
    assert info.value.target == target and info.value.status == 400


@pytest.mark.parametrize(
    ("text", "seconds"), [("PT2M", 120), ("PT1H30M", 5400), ("P1D", 86400), ("PT90.5S", 90)]
)
def test_iso_durations(text: str, seconds: int) -> None:
    assert arm_compute.iso_seconds(text, "t") == seconds


def test_native_targets_are_renamed_to_arm_paths() -> None:
    assert arm_compute.arm_target("size") == "properties.properties.vmSize"
    assert arm_compute.arm_target("max_instances") == "properties.properties.scaleSettings.maxNodeCount"
    assert arm_compute.arm_target("unmapped") == "unmapped" and arm_compute.arm_target(None) is None


def test_native_views_render_as_arm_resources() -> None:
    cluster = {
        "name": "cpu",
        "type": "amlcompute",
        "id": "/subscriptions/s/.../computes/cpu",
        "location": "local",
        "size": "Standard_DS3_v2",
        "tier": "low_priority",
        "min_instances": 0,
        "max_instances": 2,
        "idle_time_before_scale_down": 120,
        "provisioning_state": "Succeeded",
        "provisioning_errors": [],
        "allocation_state": "Steady",
        "current_node_count": 0,
        "target_node_count": 0,
        "tags": {"team": "a"},
        "identity": {"type": "system_assigned"},
    }
    resource = arm_compute.to_arm(cluster)
    inner = resource["properties"]["properties"]
    assert resource["type"] == "Microsoft.MachineLearningServices/workspaces/computes"
    assert resource["properties"]["computeType"] == "AmlCompute" and resource["tags"] == {"team": "a"}
    assert resource["identity"] == {"type": "SystemAssigned"}
    assert inner["vmPriority"] == "LowPriority" and inner["scaleSettings"] == {
        "minNodeCount": 0,
        "maxNodeCount": 2,
        "nodeIdleTimeBeforeScaleDown": "PT2M",
    }
    # Round trip: what the SDK reads back and PUTs again (begin_update) is the same document.
    again = arm_compute.from_arm({"location": "local", "tags": {"team": "a"}, **resource}, "cpu")
    assert parse_compute(again) == parse_compute({k: v for k, v in cluster.items() if k in again})

    instance = {
        "name": "ci",
        "type": "computeinstance",
        "id": "/x/computes/ci",
        "location": "local",
        "size": "Standard_DS3_v2",
        "state": "Running",
        "idle_time_before_shutdown_minutes": 45,
        "services": [{"display_name": "Jupyter Lab", "endpoint_uri": "https://h/instances/ci/lab"}],
        "provisioning_state": "Succeeded",
    }
    inner = arm_compute.to_arm(instance)["properties"]["properties"]
    assert inner["state"] == "Running" and inner["idleTimeBeforeShutdown"] == "PT45M"
    assert inner["applications"] == [
        {"displayName": "Jupyter Lab", "endpointUri": "https://h/instances/ci/lab"}
    ]
    assert "personalComputeInstanceSettings" not in inner


def _request(query: str) -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "scheme": "https",
        "server": ("127.0.0.1", 8572),
        "path": "/subscriptions/s/computes",
        "query_string": query.encode(),
        "headers": [(b"host", b"127.0.0.1:8572")],
    }
    return Request(scope)


def test_paging_follows_next_link_to_the_end() -> None:
    items, seen, query, pages = list(range(5)), [], "api-version=2024-10-01&$top=2", 0
    while query is not None:
        body = arm.page(_request(query), items, lambda i: {"n": i})
        seen += [v["n"] for v in body["value"]]
        link = body.get("nextLink")
        assert link is None or (
            link.startswith("https://127.0.0.1:8572/subscriptions/s/computes?") and "api-version" in link
        )
        query, pages = (link.split("?", 1)[1] if link else None), pages + 1
    assert seen == items and pages == 3
    with pytest.raises(CloudletError) as info:
        arm.page(_request("$skipToken=abc"), items, lambda i: i)
    assert info.value.target == "$skipToken"


def test_an_attached_vm_maps_azures_virtualmachine_properties_both_ways() -> None:
    body = {
        "properties": {
            "computeType": "VirtualMachine",
            "properties": {
                "address": "10.0.0.4",
                "sshPort": 2222,
                "administratorAccount": {"username": "azureuser", "sshPrivateKeyFile": "/keys/vm"},
            },
        }
    }
    doc = arm_compute.from_arm(body, "vm1")
    assert doc["address"] == "10.0.0.4"
    assert doc["ssh_settings"] == {
        "admin_username": "azureuser",
        "ssh_private_key_file": "/keys/vm",
        "ssh_port": 2222,
    }
    parse_compute(doc)  # a valid native document
    view = {**doc, "id": "/x/computes/vm1", "provisioning_state": "Succeeded", "state": "Idle"}
    inner = arm_compute.to_arm(view)["properties"]["properties"]
    assert inner == {
        "address": "10.0.0.4",
        "sshPort": 2222,
        "administratorAccount": {"username": "azureuser"},  # never the key's path or a password
        "state": "Idle",
    }
    keyed = {
        "properties": {
            "computeType": "VirtualMachine",
            "properties": {
                "address": "h",
                "administratorAccount": {"username": "u", "privateKeyData": "-----BEGIN"},
            },
        }
    }
    with pytest.raises(CloudletError) as caught:
        arm_compute.from_arm(keyed, "vm2")
    assert caught.value.target == "properties.properties.administratorAccount.privateKeyData"
