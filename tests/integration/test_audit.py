"""Acceptance: the audit log over the real HTTP API. Every kind of change appears with its actor and
details, a refused change leaves no entry, only administrators read it, and it pages newest first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import act, create_instance, delete_instance
from tests.jobs_helpers import served

AUDIT = "/api/v1/audit"
PRINCIPALS = "/api/v1/principals"
CLUSTER: dict[str, Any] = {
    "type": "amlcompute",
    "size": "Standard_DS3_v2",
    "min_instances": 0,
    "max_instances": 2,
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "audit")


def entries(api: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    response = api.get(AUDIT, params={"$top": 1000, **params})
    assert response.status_code == 200, response.text
    value: list[dict[str, Any]] = response.json()["value"]
    return value


def latest(api: httpx.Client, action: str, target_suffix: str) -> dict[str, Any]:
    found = [e for e in entries(api, action=action) if e["target"].endswith(target_suffix)]
    assert found, f"no {action} entry for …{target_suffix}"
    return found[0]


def newest_id(api: httpx.Client) -> int:
    return int(entries(api, **{"$top": 1})[0]["id"])


def ok(response: httpx.Response, *statuses: int) -> dict[str, Any]:
    assert response.status_code in (statuses or (200, 201)), response.text
    body: dict[str, Any] = response.json() if response.content else {}
    return body


def operate(srv: RunningServer, api: httpx.Client, response: httpx.Response) -> None:
    assert response.status_code in (200, 201, 202), response.text
    assert (
        srv.wait_operation(api, response.headers["Operation-Location"], timeout=60)["status"] == "Succeeded"
    )


def user(api: httpx.Client, srv: RunningServer, name: str, role: str | None) -> dict[str, Any]:
    ok(api.post(PRINCIPALS, json={"name": name}))
    key = ok(api.post(f"{PRINCIPALS}/{name}/keys"))
    if role:
        ok(api.put(f"{srv.ws_path}/roleAssignments/{name}", json={"role": role}))
    return key


def test_only_administrators_read_the_log(api: httpx.Client, srv: RunningServer) -> None:
    for name, role in [("aud-reader", "Reader"), ("aud-contrib", "Contributor"), ("aud-owner", "Owner")]:
        key = user(api, srv, name, role)
        with srv.client(key["api_key"]) as client:
            response = client.get(AUDIT)
            assert response.status_code == 403, response.text
            assert response.json()["error"]["code"] == "AuthorizationFailed"
            assert "administrator" in response.json()["error"]["message"]


def test_the_control_plane_records_its_own_changes(api: httpx.Client) -> None:
    boot = entries(api, actor="system:bootstrap")
    assert {e["action"] for e in boot} == {"principal.create", "apiKey.create"}
    assert {e["target"].split("/keys/")[0] for e in boot} == {"/principals/admin"}


def test_a_refused_change_writes_no_entry(api: httpx.Client, srv: RunningServer) -> None:
    reader = user(api, srv, "refused-reader", "Reader")
    ok(api.put(f"{srv.ws_path}/computes/steady", json=CLUSTER))
    admin_key = next(k for k in api.get(f"{PRINCIPALS}/admin/keys").json()["value"] if k["state"] == "Active")
    quotas = f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/quotas"
    before = newest_id(api)
    refusals = [
        api.put(f"{quotas}/noSuchFamily", json={"limit": 4}),
        api.put(f"{quotas}/standardDSv2Family", json={"limit": -1}),
        api.put(
            f"{srv.ws_path}/computes/too-big",
            json={**CLUSTER, "min_instances": 10_000, "max_instances": 10_000},
        ),
        api.post(f"{srv.ws_path}/computes/steady/start"),  # clusters have no start
        api.patch(f"{srv.ws_path}/computes/steady", json={"size": "Standard_DS4_v2"}),
        api.put(f"{srv.ws_path}/roleAssignments/refused-reader", json={"role": "Emperor"}),
        api.put(f"{srv.ws_path}/roleAssignments/nobody", json={"role": "Reader"}),
        api.delete(f"{srv.ws_path}/roleAssignments/nobody"),
        api.delete(f"{PRINCIPALS}/admin/keys/{admin_key['id']}"),  # the last administrator's key
        api.post(PRINCIPALS, json={"name": "refused-reader"}),  # exists
        api.put("/api/v1/locations/Bad_Name", json={"provider": "local"}),
        api.put("/api/v1/locations/lab", json={"provider": "slurm"}),
        api.post("/api/v1/sizes", json={"name": "Half_Size"}),
        api.delete(f"{srv.ws_path}/locks/no-such-lock"),
    ]
    with srv.client(reader["api_key"]) as client:
        refusals += [
            client.put(f"{srv.ws_path}/locks/mine", json={"level": "ReadOnly"}),
            client.delete(f"{srv.ws_path}/computes/steady"),
            client.put(f"{srv.ws_path}/roleAssignments/refused-reader", json={"role": "Owner"}),
            client.post(f"{PRINCIPALS}/refused-reader/keys"),
        ]
    assert all(400 <= r.status_code < 500 for r in refusals), [(r.status_code, r.text) for r in refusals]
    assert newest_id(api) == before, entries(api)[:5]


def test_every_kind_of_change_is_recorded_with_actor_and_details(
    api: httpx.Client, srv: RunningServer
) -> None:
    owner = user(api, srv, "aud-ws-owner", "Owner")
    ws = srv.ws_path
    issued: list[str] = [owner["api_key"]]

    # Identity: keys, roles, users.
    rotated = ok(api.post(f"{PRINCIPALS}/aud-ws-owner/keys/{owner['id']}/rotate"))
    issued.append(rotated["api_key"])
    extra = ok(api.post(f"{PRINCIPALS}/aud-ws-owner/keys", json={"expires_in_days": 7}))
    issued.append(extra["api_key"])
    ok(api.delete(f"{PRINCIPALS}/aud-ws-owner/keys/{extra['id']}"), 204)
    ok(api.put(f"{ws}/roleAssignments/aud-ws-owner", json={"role": "Contributor"}))
    ok(api.patch(f"{PRINCIPALS}/aud-ws-owner", json={"enabled": False}))
    ok(api.patch(f"{PRINCIPALS}/aud-ws-owner", json={"enabled": True}))
    # The workspace Owner (not an administrator) acts too: it is the actor of what it does.
    ok(api.put(f"{ws}/roleAssignments/aud-ws-owner", json={"role": "Owner"}))
    user(api, srv, "aud-guest", None)
    with srv.client(rotated["api_key"]) as ws_owner:
        ok(ws_owner.put(f"{ws}/roleAssignments/aud-guest", json={"role": "Reader"}))
        ok(ws_owner.delete(f"{ws}/roleAssignments/aud-guest"), 204)

    # Quota, locks, locations, sizes, workspaces.
    quota = f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/quotas/standardDSv2Family"
    old_limit = next(
        q["limit"]
        for q in api.get(quota.rsplit("/", 1)[0]).json()["value"]
        if q["name"] == "standardDSv2Family"
    )
    ok(api.put(quota, json={"limit": old_limit + 8}))
    ok(api.put(f"{ws}/locks/audit-lock", json={"level": "CanNotDelete", "notes": "why"}))
    ok(api.delete(f"{ws}/locks/audit-lock"), 204)
    ok(api.put("/api/v1/locations/audit-lab", json={"capacity": {"vcpus": 32, "memory_gb": 128.5}}))
    ok(api.post("/api/v1/sizes", json={"name": "Audit_Box", "vcpus": 4, "memory_gb": 16}))
    ok(api.put(srv.workspace_path("audit-team"), json={"location": "local", "description": "audited"}))

    # Computes: a cluster created, updated, deleted; an instance stopped, started, restarted.
    operate(srv, api, api.put(f"{ws}/computes/aud-cluster", json=CLUSTER))
    operate(srv, api, api.patch(f"{ws}/computes/aud-cluster", json={"max_instances": 3}))
    operate(srv, api, api.delete(f"{ws}/computes/aud-cluster"))
    create_instance(api, srv, "aud-ci")
    for action in ("stop", "start", "restart"):
        act(api, srv, "aud-ci", action)
    delete_instance(api, srv, "aud-ci")

    principal = "/principals/aud-ws-owner"
    assignment = "/workspaces/default/roleAssignments/aud-ws-owner"
    created = latest(api, "principal.create", principal)
    assert (created["actor"], created["details"]) == ("admin", {"is_admin": False})
    assert latest(api, "apiKey.create", f"/keys/{extra['id']}")["details"]["expires_on"]
    rotation = latest(api, "apiKey.rotate", f"/keys/{owner['id']}")
    assert rotation["details"]["new_key_id"] == rotated["id"] and rotation["details"]["grace_minutes"] == 0
    assert latest(api, "apiKey.revoke", f"/keys/{extra['id']}")["details"]["key_id"] == extra["id"]
    demoted = latest(api, "roleAssignment.write", assignment)
    assert demoted["actor"] == "admin" and demoted["target"].startswith("/subscriptions/")
    writes = [e for e in entries(api, action="roleAssignment.write") if e["target"].endswith(assignment)]
    assert [(e["details"]["old_role"], e["details"]["new_role"]) for e in writes[:3]] == [
        ("Contributor", "Owner"),
        ("Owner", "Contributor"),
        (None, "Owner"),
    ]
    guest = "/roleAssignments/aud-guest"
    assert latest(api, "roleAssignment.write", guest)["actor"] == "aud-ws-owner"
    removed = latest(api, "roleAssignment.delete", guest)
    assert removed["actor"] == "aud-ws-owner" and removed["details"]["role"] == "Reader"
    assert latest(api, "principal.disable", principal)["details"] == {"enabled": False}
    assert latest(api, "principal.enable", principal)["details"] == {"enabled": True}

    set_quota = latest(api, "quota.write", "/quotas/standardDSv2Family")
    assert (set_quota["details"]["old_limit"], set_quota["details"]["new_limit"]) == (
        old_limit,
        old_limit + 8,
    )
    assert "/providers/Microsoft.MachineLearningServices/locations/local/" in set_quota["target"]
    lock = latest(api, "lock.write", "/providers/Microsoft.Authorization/locks/audit-lock")
    assert (
        lock["details"]["new"] == {"level": "CanNotDelete", "notes": "why"} and lock["details"]["old"] is None
    )
    assert latest(api, "lock.delete", "/locks/audit-lock")["details"]["level"] == "CanNotDelete"
    location = latest(api, "location.write", "/locations/audit-lab")
    assert location["details"]["new"]["capacity"]["vcpus"] == 32 and location["details"]["old"] is None
    assert latest(api, "size.create", "/sizes/Audit_Box")["details"]["vcpus"] == 4
    workspace = latest(api, "workspace.create", "/workspaces/audit-team")
    assert workspace["details"]["changed"]["description"] == {"old": None, "new": "audited"}

    cluster = "/workspaces/default/computes/aud-cluster"
    made = latest(api, "compute.create", cluster)
    assert (
        made["actor"] == "admin"
        and made["details"]["type"] == "amlcompute"
        and made["details"]["operation_id"]
    )
    changed = latest(api, "compute.update", cluster)["details"]["changed"]
    assert changed == {"max_instances": {"old": 2, "new": 3}}, changed
    assert latest(api, "compute.delete", cluster)["details"]["type"] == "amlcompute"
    instance = "/computes/aud-ci"
    assert latest(api, "compute.create", instance)["details"]["owner"] == "admin"
    for action, state in (("stop", "Stopping"), ("start", "Starting"), ("restart", "Restarting")):
        entry = latest(api, f"compute.{action}", instance)
        assert entry["actor"] == "admin" and entry["details"]["new_state"] == state, entry

    # The log never holds a secret, though every secret issued above passed through its changes.
    dump = json.dumps(entries(api))
    assert not any(secret in dump for secret in issued)


def test_filters_and_paging(api: httpx.Client, srv: RunningServer) -> None:
    marks = [f"page-{i}" for i in range(5)]
    start = datetime.now(UTC) - timedelta(seconds=1)
    for name in marks:
        ok(api.post(PRINCIPALS, json={"name": name}))
    # Newest first, five pages of one, each continuing where the last stopped.
    seen: list[str] = []
    page = ok(api.get(AUDIT, params={"action": "principal.create", "since": start.isoformat(), "$top": 1}))
    while True:
        seen += [e["target"] for e in page["value"]]
        if "nextLink" not in page:
            break
        assert "%24top=1" in page["nextLink"] or "$top=1" in page["nextLink"], page["nextLink"]
        page = ok(api.get(page["nextLink"]))
    assert seen == [f"/principals/{name}" for name in reversed(marks)]

    assert {e["action"] for e in entries(api, action="principal")} >= {"principal.create"}
    assert all(e["action"].startswith("principal.") for e in entries(api, action="principal"))
    assert entries(api, action="princ") == []
    assert all(e["actor"] == "admin" for e in entries(api, actor="admin"))
    assert entries(api, actor="nobody") == []
    assert [e["target"] for e in entries(api, target="/principals/page-3")] == ["/principals/page-3"]
    assert len(entries(api, target="/principals/page-3/")) == 1
    assert entries(api, until=start.isoformat(), action="principal.create", target="/principals/page-0") == []
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert entries(api, since=future) == []

    for params, target in [
        ({"$skipToken": "not-a-token"}, "$skipToken"),
        ({"$top": 0}, "$top"),
        ({"$top": 1001}, "$top"),
        ({"since": "yesterday"}, "since"),
    ]:
        response = api.get(AUDIT, params=params)
        # Query parameters are named "query.<name>" by the app's validation handler.
        assert response.status_code == 400, response.text
        assert response.json()["error"]["target"].endswith(target), response.text


def test_the_request_id_is_recorded(api: httpx.Client, srv: RunningServer) -> None:
    response = api.post(PRINCIPALS, json={"name": "traced"}, headers={"x-ms-client-request-id": "req-42"})
    assert response.status_code == 201, response.text
    assert latest(api, "principal.create", "/principals/traced")["request_id"] == "req-42"
    # Every user route binds it (the route class), not only the access routes.
    lock = f"{srv.ws_path}/locks/traced"
    response = api.put(lock, json={"level": "CanNotDelete"}, headers={"x-request-id": "req-43"})
    assert response.status_code == 201, response.text
    assert latest(api, "lock.write", "/locks/traced")["request_id"] == "req-43"
    # A route without a body runs on api/direct.py's threads: the id reaches them too.
    assert api.delete(lock, headers={"x-request-id": "req-44"}).status_code == 204
    assert latest(api, "lock.delete", "/locks/traced")["request_id"] == "req-44"
