"""Acceptance: management locks (C6) and workspace roles over the real HTTP API.

One server per module. Locks are removed in ``finally`` blocks so that a failing test does not
leave the shared server locked for the next one.
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
    "size": "Standard_DS3_v2",
    "min_instances": 0,
    "max_instances": 2,
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "locks-roles")


def compute_url(srv: RunningServer, name: str, workspace: str = "default") -> str:
    return f"{srv.workspace_path(workspace)}/computes/{name}"


def rg_url(srv: RunningServer) -> str:
    return f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/default"


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "target", "details"}, error
    assert error["code"] == code, error
    return error


def create(api: httpx.Client, srv: RunningServer, name: str, body: dict[str, Any] | None = None) -> None:
    response = api.put(compute_url(srv, name), json=body or CLUSTER)
    assert response.status_code == 201, response.text
    assert srv.wait_operation(api, response.headers["Operation-Location"])["status"] == "Succeeded"


def put_lock(api: httpx.Client, scope: str, name: str, level: str) -> None:
    response = api.put(f"{scope}/locks/{name}", json={"level": level, "notes": "test"})
    assert response.status_code == 201, response.text
    assert response.json()["level"] == level


def delete_lock(api: httpx.Client, scope: str, name: str) -> None:
    assert api.delete(f"{scope}/locks/{name}").status_code == 204


def names(client: httpx.Client, srv: RunningServer, workspace: str = "default") -> list[str]:
    response = client.get(f"{srv.workspace_path(workspace)}/computes")
    assert response.status_code == 200, response.text
    return sorted(c["name"] for c in response.json()["value"])


def delete_and_wait(api: httpx.Client, srv: RunningServer, name: str) -> None:
    response = api.delete(compute_url(srv, name))
    assert response.status_code == 202, response.text
    assert srv.wait_operation(api, response.headers["Operation-Location"])["status"] == "Succeeded"
    assert api.get(compute_url(srv, name)).status_code == 404


# -- locks (item 4) -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["compute", "workspace"])
def test_cannot_delete_lock_blocks_delete(api: httpx.Client, srv: RunningServer, where: str) -> None:
    name = f"undeletable-{where}"
    create(api, srv, name)
    scope = compute_url(srv, name) if where == "compute" else srv.ws_path
    put_lock(api, scope, "keep-me", "CanNotDelete")
    try:
        error = error_of(api.delete(compute_url(srv, name)), 409, "ScopeLocked")
        assert "keep-me" in error["message"] and name in error["message"], error
        shown = api.get(compute_url(srv, name))
        assert shown.status_code == 200
        assert shown.json()["provisioning_state"] == "Succeeded"
        assert name in names(api, srv)
        # CanNotDelete still allows updates.
        patched = api.patch(compute_url(srv, name), json={"max_instances": 3})
        assert patched.status_code == 200, patched.text
        assert srv.wait_operation(api, patched.headers["Operation-Location"])["status"] == "Succeeded"
    finally:
        delete_lock(api, scope, "keep-me")
    delete_and_wait(api, srv, name)


def test_read_only_lock_blocks_updates(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "frozen")
    scope = compute_url(srv, "frozen")
    put_lock(api, scope, "freeze", "ReadOnly")
    try:
        put = api.put(compute_url(srv, "frozen"), json={**CLUSTER, "max_instances": 3})
        assert "freeze" in error_of(put, 409, "ScopeLocked")["message"]
        patch = api.patch(compute_url(srv, "frozen"), json={"max_instances": 3})
        assert "freeze" in error_of(patch, 409, "ScopeLocked")["message"]
        error_of(api.delete(compute_url(srv, "frozen")), 409, "ScopeLocked")
        shown = api.get(compute_url(srv, "frozen")).json()
        assert (shown["max_instances"], shown["provisioning_state"]) == (2, "Succeeded")
    finally:
        delete_lock(api, scope, "freeze")
    patch = api.patch(compute_url(srv, "frozen"), json={"max_instances": 3})
    assert patch.status_code == 200, patch.text


def test_read_only_workspace_lock_blocks_new_computes(api: httpx.Client, srv: RunningServer) -> None:
    put_lock(api, srv.ws_path, "ws-freeze", "ReadOnly")
    try:
        before = names(api, srv)
        error_of(api.put(compute_url(srv, "blocked-new"), json=CLUSTER), 409, "ScopeLocked")
        assert api.get(compute_url(srv, "blocked-new")).status_code == 404
        assert names(api, srv) == before
    finally:
        delete_lock(api, srv.ws_path, "ws-freeze")


def test_resource_group_lock_blocks_cluster_scaling(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "scaler")
    compute_lock_scope = compute_url(srv, "scaler")
    # A lock on the compute itself does not freeze scaling (only one above the workspace does).
    put_lock(api, compute_lock_scope, "item-lock", "CanNotDelete")
    try:
        shown = api.get(compute_url(srv, "scaler")).json()
        assert (shown["scaling_blocked"], shown["allocation_state"]) == (None, "Steady")
    finally:
        delete_lock(api, compute_lock_scope, "item-lock")

    put_lock(api, rg_url(srv), "rg-guard", "CanNotDelete")
    try:
        shown = api.get(compute_url(srv, "scaler")).json()
        blocked = shown["scaling_blocked"]
        assert blocked is not None, shown
        assert blocked["lock"] == "rg-guard"
        assert "rg-guard" in blocked["reason"]
        assert blocked["scope"].rstrip("/").endswith("/resourceGroups/default")
        assert blocked["fix"]
        assert shown["allocation_state"] == "Resizing"
        listed = {c["name"]: c for c in api.get(f"{srv.ws_path}/computes").json()["value"]}
        assert listed["scaler"]["scaling_blocked"]["lock"] == "rg-guard"
    finally:
        delete_lock(api, rg_url(srv), "rg-guard")
    shown = api.get(compute_url(srv, "scaler")).json()
    assert (shown["scaling_blocked"], shown["allocation_state"]) == (None, "Steady")


# -- roles (item 5) -------------------------------------------------------------------------


def new_user(api: httpx.Client, name: str) -> str:
    created = api.post("/api/v1/principals", json={"name": name})
    assert created.status_code == 201, created.text
    assert created.json()["name"] == name
    key = api.post(f"/api/v1/principals/{name}/keys")
    assert key.status_code == 201, key.text
    body = key.json()
    assert body["principal"] == name
    return str(body["api_key"])


def assign(api: httpx.Client, srv: RunningServer, user: str, role: str, workspace: str = "default") -> None:
    response = api.put(f"{srv.workspace_path(workspace)}/roleAssignments/{user}", json={"role": role})
    assert response.status_code == 200, response.text
    assert response.json()["role"] == role


def test_reader_can_read_but_not_write(api: httpx.Client, srv: RunningServer) -> None:
    create(api, srv, "shared")
    key = new_user(api, "reader1")
    with srv.client(key) as reader:
        # No role yet: the workspace is invisible.
        error_of(reader.get(compute_url(srv, "shared")), 404, "ResourceNotFound")
        assign(api, srv, "reader1", "Reader")
        whoami = reader.get("/api/v1/whoami").json()
        assert whoami["principal"] == "reader1" and whoami["is_admin"] is False
        assert [r["role"] for r in whoami["roles"]] == ["Reader"]

        assert reader.get(compute_url(srv, "shared")).status_code == 200
        assert "shared" in names(reader, srv)

        before = names(api, srv)
        error_of(reader.put(compute_url(srv, "reader-made"), json=CLUSTER), 403, "AuthorizationFailed")
        assert api.get(compute_url(srv, "reader-made")).status_code == 404
        put = reader.put(compute_url(srv, "shared"), json={**CLUSTER, "max_instances": 3})
        error_of(put, 403, "AuthorizationFailed")
        error_of(
            reader.patch(compute_url(srv, "shared"), json={"max_instances": 3}), 403, "AuthorizationFailed"
        )
        error_of(reader.delete(compute_url(srv, "shared")), 403, "AuthorizationFailed")
        error_of(
            reader.put(f"{srv.ws_path}/locks/reader-lock", json={"level": "ReadOnly"}),
            403,
            "AuthorizationFailed",
        )

        shown = api.get(compute_url(srv, "shared")).json()
        assert (shown["max_instances"], shown["provisioning_state"]) == (2, "Succeeded")
        assert names(api, srv) == before


def test_role_on_one_workspace_does_not_reveal_another(api: httpx.Client, srv: RunningServer) -> None:
    ws_b = srv.workspace_path("team-b")
    created = api.put(ws_b, json={"location": "local", "description": "B"})
    assert created.status_code == 201, created.text
    again = api.put(ws_b, json={"location": "local", "description": "B"})
    assert again.status_code == 200, again.text
    create_b = api.put(compute_url(srv, "b-cluster", "team-b"), json=CLUSTER)
    assert create_b.status_code == 201, create_b.text
    assert srv.wait_operation(api, create_b.headers["Operation-Location"])["status"] == "Succeeded"

    admin_sees = {w["name"] for w in api.get("/api/v1/workspaces").json()["value"]}
    assert {"default", "team-b"} <= admin_sees

    key = new_user(api, "contrib-a")
    assign(api, srv, "contrib-a", "Contributor")  # on the default workspace only
    with srv.client(key) as user:
        assert [w["name"] for w in user.get("/api/v1/workspaces").json()["value"]] == ["default"]
        assert user.get(srv.ws_path).status_code == 200
        error_of(user.get(ws_b), 404, "ResourceNotFound")
        error_of(user.get(f"{ws_b}/computes"), 404, "ResourceNotFound")
        error_of(user.get(compute_url(srv, "b-cluster", "team-b")), 404, "ResourceNotFound")
        error_of(user.put(compute_url(srv, "sneaky", "team-b"), json=CLUSTER), 404, "ResourceNotFound")
        error_of(user.delete(compute_url(srv, "b-cluster", "team-b")), 404, "ResourceNotFound")
        # Contributor can write in A.
        ok = user.put(compute_url(srv, "contrib-made"), json=CLUSTER)
        assert ok.status_code == 201, ok.text
    assert names(api, srv, "team-b") == ["b-cluster"]
    assert api.get(compute_url(srv, "b-cluster", "team-b")).json()["provisioning_state"] == "Succeeded"
