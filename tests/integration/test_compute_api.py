"""Acceptance: compute create / refuse / update over the real HTTP API (one server per module).

Every refusal is checked for its status, error code, the field it names, and that nothing was
created: the compute is absent (404), the workspace's compute list and the core usage are unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import served

CLUSTER: dict[str, Any] = {
    "type": "amlcompute",
    "size": "STANDARD_DS3_v2",
    "min_instances": 0,
    "max_instances": 2,
    "idle_time_before_scale_down": 120,
}
INSTANCE: dict[str, Any] = {"type": "computeinstance", "size": "Standard_DS3_v2"}
DS_FAMILY = "standardDSv2Family"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "compute-api")


# -- helpers ----------------------------------------------------------------------------------


def compute_url(srv: RunningServer, name: str) -> str:
    return f"{srv.ws_path}/computes/{name}"


def usage_url(srv: RunningServer) -> str:
    return f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/usages"


def compute_names(api: httpx.Client, srv: RunningServer) -> list[str]:
    response = api.get(f"{srv.ws_path}/computes")
    assert response.status_code == 200, response.text
    return sorted(c["name"] for c in response.json()["value"])


def usage(api: httpx.Client, srv: RunningServer) -> dict[str, dict[str, Any]]:
    response = api.get(usage_url(srv))
    assert response.status_code == 200, response.text
    return {line["name"]: line for line in response.json()["value"]}


def snapshot(api: httpx.Client, srv: RunningServer) -> tuple[list[str], dict[str, int]]:
    return compute_names(api, srv), {k: v["current_value"] for k, v in usage(api, srv).items()}


def assert_error(response: httpx.Response, status: int, code: str, target: str | None = None) -> str:
    """The error body shape of docs/api.md; returns the message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "target", "details"}, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["details"], list), error
    if target is not None:
        assert error["target"] == target, error
    return str(error["message"])


def create(api: httpx.Client, srv: RunningServer, name: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.put(compute_url(srv, name), json=body)
    assert response.status_code == 201, response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"])
    assert op["status"] == "Succeeded", op
    shown = api.get(compute_url(srv, name)).json()
    assert shown["provisioning_state"] == "Succeeded", shown
    return shown


def act(api: httpx.Client, srv: RunningServer, name: str, action: str) -> dict[str, Any]:
    response = api.post(f"{compute_url(srv, name)}/{action}")
    assert response.status_code == 202, response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"])
    assert op["status"] == "Succeeded", op
    return op


def assert_refused(
    api: httpx.Client,
    srv: RunningServer,
    name: str,
    body: dict[str, Any],
    code: str,
    target: str,
    *in_message: str,
    status: int = 400,
) -> str:
    before = snapshot(api, srv)
    message = assert_error(api.put(compute_url(srv, name), json=body), status, code, target)
    for part in in_message:
        assert part in message, (part, message)
    assert_error(api.get(compute_url(srv, name)), 404, "ResourceNotFound", name)
    assert snapshot(api, srv) == before
    return message


# -- refusals (item 2) ------------------------------------------------------------------------


def test_unknown_location_is_refused(api: httpx.Client, srv: RunningServer) -> None:
    assert_refused(
        api,
        srv,
        "far-cluster",
        {**CLUSTER, "location": "mars"},
        "UnknownLocation",
        "location",
        "mars",
        "local",
    )


def test_invalid_json_body_is_refused_naming_the_body(api: httpx.Client, srv: RunningServer) -> None:
    before = snapshot(api, srv)
    response = api.put(
        compute_url(srv, "broken-json"), content=b"{not json", headers={"Content-Type": "application/json"}
    )
    message = assert_error(response, 400, "InvalidRequest", "$")
    assert "not valid JSON" in message, message
    assert api.get(compute_url(srv, "broken-json")).status_code == 404
    assert snapshot(api, srv) == before


def test_retired_series_is_refused_naming_a_replacement(api: httpx.Client, srv: RunningServer) -> None:
    message = assert_refused(
        api,
        srv,
        "retired-gpu",
        {**CLUSTER, "size": "Standard_NC6s_v3"},
        "RetiredVmSeries",
        "size",
        "Standard_NC6s_v3",
        "retired",
    )
    assert "NCasT4_v3" in message or "NDasrA100_v4" in message, message


def test_fx_size_is_refused_for_an_instance(api: httpx.Client, srv: RunningServer) -> None:
    assert_refused(
        api,
        srv,
        "fx-instance",
        {**INSTANCE, "size": "Standard_FX4mds"},
        "VmSizeNotSupportedForComputeType",
        "size",
        "Standard_FX4mds",
        "computeinstance",
    )


def test_fx_size_is_accepted_for_a_cluster_when_quota_allows(api: httpx.Client, srv: RunningServer) -> None:
    """Control for the test above: FX is a cluster size; with min_instances 0 it holds no quota."""
    shown = create(api, srv, "fx-cluster", {**CLUSTER, "size": "Standard_FX4mds"})
    assert shown["size"] == "Standard_FX4mds"


def test_unknown_field_is_refused_with_the_field_as_target(api: httpx.Client, srv: RunningServer) -> None:
    assert_refused(
        api,
        srv,
        "typo-cluster",
        {**CLUSTER, "max_instance": 3},
        "ValidationError",
        "max_instance",
        "max_instance",
    )


def test_unknown_nested_field_is_refused_with_its_path(api: httpx.Client, srv: RunningServer) -> None:
    body = {
        **INSTANCE,
        "schedules": {
            "compute_start_stop": [
                {"action": "stop", "trigger": {"type": "cron", "expression": "0 18 * * *", "timezone": "UTC"}}
            ]
        },
    }
    assert_refused(
        api,
        srv,
        "typo-instance",
        body,
        "ValidationError",
        "schedules.compute_start_stop[0].trigger.timezone",
        "timezone",
    )


def test_wrong_type_is_refused(api: httpx.Client, srv: RunningServer) -> None:
    assert_refused(
        api,
        srv,
        "typed-cluster",
        {**CLUSTER, "min_instances": "two"},
        "ValidationError",
        "min_instances",
        "min_instances",
        "two",
    )


def test_max_below_min_is_refused(api: httpx.Client, srv: RunningServer) -> None:
    assert_refused(
        api,
        srv,
        "inverted-cluster",
        {**CLUSTER, "min_instances": 3, "max_instances": 2},
        "ValidationError",
        "max_instances",
        "max_instances",
        "min_instances",
    )


@pytest.mark.parametrize("minutes", [10, 5000])
def test_instance_idle_shutdown_outside_15_minutes_to_3_days_is_refused(
    api: httpx.Client, srv: RunningServer, minutes: int
) -> None:
    message = assert_refused(
        api,
        srv,
        f"idle-{minutes}",
        {**INSTANCE, "idle_time_before_shutdown_minutes": minutes},
        "ValidationError",
        "idle_time_before_shutdown_minutes",
        "15 minutes",
        "3 days",
    )
    assert str(minutes) in message


def test_min_instances_beyond_quota_names_used_cores_and_holders(
    api: httpx.Client, srv: RunningServer
) -> None:
    quota_url = f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/quotas/{DS_FAMILY}"
    create(api, srv, "ci1", INSTANCE)
    act(api, srv, "ci1", "stop")
    assert api.get(compute_url(srv, "ci1")).json()["state"] == "Stopped"
    used = usage(api, srv)[DS_FAMILY]["current_value"]
    assert used >= 4  # a stopped instance keeps its cores
    response = api.put(quota_url, json={"limit": used + 4})
    assert response.status_code == 200, response.text
    try:
        # 2 nodes × 4 cores = 8 > (used + 4) − used: refused, while 1 node (4 cores) would fit.
        message = assert_refused(
            api,
            srv,
            "big-cluster",
            {**CLUSTER, "min_instances": 2, "max_instances": 2},
            "ClusterMinNodesExceedCoreQuota",
            "min_instances",
            f"{used} used",
            "ci1 stopped: 4",
            DS_FAMILY,
        )
        assert "min_instances 2 × 4 cores" in message, message
        fits = create(api, srv, "fits-cluster", {**CLUSTER, "min_instances": 1, "max_instances": 2})
        assert fits["min_instances"] == 1
        # An update that grows beyond quota is refused too, and leaves the cluster as it was.
        refused = api.put(compute_url(srv, "fits-cluster"), json={**CLUSTER, "min_instances": 2})
        assert_error(refused, 400, "ClusterMinNodesExceedCoreQuota", "min_instances")
        assert api.get(compute_url(srv, "fits-cluster")).json()["min_instances"] == 1
        deleted = api.delete(compute_url(srv, "fits-cluster"))
        assert deleted.status_code == 202, deleted.text
        assert srv.wait_operation(api, deleted.headers["Operation-Location"])["status"] == "Succeeded"
    finally:
        assert api.put(quota_url, json={"limit": 100}).status_code == 200


def test_stopped_instance_is_a_usage_holder(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "ci-usage", INSTANCE)
    before = usage(api, srv)[DS_FAMILY]["current_value"]
    act(api, srv, "ci-usage", "stop")
    line = usage(api, srv)[DS_FAMILY]
    assert line["current_value"] == before, "stopping must not release quota"
    assert line["current_value"] == sum(h["cores"] for h in line["holders"])
    holder = next(h for h in line["holders"] if h["compute"] == "ci-usage")
    assert holder == {"compute": "ci-usage", "workspace": "default", "cores": 4, "state": "Stopped"}


# -- create-or-update ---------------------------------------------------------------------------


def test_create_on_existing_name_updates(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "upsert-cluster", CLUSTER)
    names = compute_names(api, srv)
    response = api.put(compute_url(srv, "upsert-cluster"), json={**CLUSTER, "max_instances": 3})
    assert response.status_code == 200, response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"])
    assert (op["kind"], op["status"]) == ("update", "Succeeded"), op
    shown = api.get(compute_url(srv, "upsert-cluster")).json()
    assert (shown["max_instances"], shown["provisioning_state"]) == (3, "Succeeded")
    assert compute_names(api, srv) == names


def test_changing_size_of_existing_cluster_is_a_conflict(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "fixed-size", CLUSTER)
    before = snapshot(api, srv)
    response = api.put(compute_url(srv, "fixed-size"), json={**CLUSTER, "size": "Standard_D2_v2"})
    message = assert_error(response, 409, "ImmutableFieldChange", "size")
    assert "'size'" in message and "Standard_D2_v2" in message, message
    shown = api.get(compute_url(srv, "fixed-size")).json()
    assert (shown["size"], shown["provisioning_state"]) == ("Standard_DS3_v2", "Succeeded")
    assert snapshot(api, srv) == before
    # PATCH refuses the same change, naming the field.
    patched = api.patch(compute_url(srv, "fixed-size"), json={"size": "Standard_D2_v2"})
    assert "size" in assert_error(patched, 400, "ValidationError", "size")
    assert api.get(compute_url(srv, "fixed-size")).json()["size"] == "Standard_DS3_v2"


def test_patch_changes_scale_settings(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "patched", CLUSTER)
    response = api.patch(compute_url(srv, "patched"), json={"max_instances": 4, "description": "scaled"})
    assert response.status_code == 200, response.text
    assert srv.wait_operation(api, response.headers["Operation-Location"])["status"] == "Succeeded"
    shown = api.get(compute_url(srv, "patched")).json()
    assert (shown["max_instances"], shown["description"], shown["size"]) == (4, "scaled", "Standard_DS3_v2")
    # An invalid PATCH (max below min) is refused and changes nothing.
    bad = api.patch(compute_url(srv, "patched"), json={"min_instances": 3, "max_instances": 1})
    assert_error(bad, 400, "ValidationError", "max_instances")
    assert api.get(compute_url(srv, "patched")).json()["max_instances"] == 4


# -- error format, auth, OpenAPI (item 6) ---------------------------------------------------------


def test_unknown_compute_is_a_json_404(api: httpx.Client, srv: RunningServer) -> None:
    message = assert_error(api.get(compute_url(srv, "no-such")), 404, "ResourceNotFound", "no-such")
    assert "no-such" in message


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer clk_not-a-real-key"},
        {"Authorization": "Bearer clt_forged.token"},
        {"Authorization": "Basic YWRtaW46YWRtaW4="},
    ],
    ids=["missing", "unknown-key", "forged-token", "not-bearer"],
)
def test_missing_or_invalid_bearer_is_401(srv: RunningServer, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=srv.endpoint, headers=headers, timeout=30) as anon:
        assert_error(anon.get(f"{srv.ws_path}/computes"), 401, "AuthenticationFailed")
        before_put = anon.put(compute_url(srv, "anon-cluster"), json=CLUSTER)
        assert_error(before_put, 401, "AuthenticationFailed")
    with srv.client() as admin:
        assert admin.get(compute_url(srv, "anon-cluster")).status_code == 404


def test_openapi_document_is_served(srv: RunningServer) -> None:
    response = httpx.get(srv.endpoint + "/openapi.json", timeout=30)
    assert response.status_code == 200
    doc = response.json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    compute_path = "/api/v1/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}/computes/{name}"
    assert {"get", "put", "patch", "delete"} <= set(paths[compute_path])
    assert "/api/v1/operations/{op_id}" in paths


def test_cluster_in_another_location_gets_the_c4_warning(api: httpx.Client, srv: RunningServer) -> None:
    workspace_location = api.get(srv.ws_path).json()["location"]
    added = api.put("/api/v1/locations/edge", json={"provider": "local"})
    assert added.status_code in (200, 201), added.text
    assert "edge" in {loc["name"] for loc in api.get("/api/v1/locations").json()["value"]}

    shown = create(api, srv, "remote-cluster", {**CLUSTER, "location": "edge"})
    assert shown["location"] == "edge"
    [warning] = shown["warnings"]
    assert warning["code"] == "CrossLocationCompute", warning
    assert "edge" in warning["message"] and workspace_location in warning["message"], warning
    # The same-location cluster carries no warning (control).
    assert create(api, srv, "home-cluster", {**CLUSTER, "location": workspace_location})["warnings"] == []
    # Instances must stay in the workspace's location.
    assert_refused(
        api,
        srv,
        "remote-ci",
        {**INSTANCE, "location": "edge"},
        "InstanceLocationMismatch",
        "location",
        workspace_location,
    )
