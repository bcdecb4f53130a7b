"""Acceptance: revoking access (issue 10, defect 6) over the real HTTP API.

API keys expire, are revoked and rotated; tokens minted from a key end with it; role assignments
are removed; users are disabled; request bodies are typed. One server per module: every test makes
its own users, so none depends on another's leftovers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from cloudlet.services.access.identity import CALLER_CACHE_TTL_S
from tests.conftest import RunningServer
from tests.jobs_helpers import served, wait_until

PRINCIPALS = "/api/v1/principals"
# How long a revoked credential may keep working (docs/access.md): the caller cache period. A
# little is added for a loaded machine; the tests wait for the refusal, they do not sleep first.
REVOCATION_BOUND_S = CALLER_CACHE_TTL_S + 3


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "access")


def error_of(response: httpx.Response, status: int, code: str, target: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "target", "details"}, error
    assert error["code"] == code, error
    if target is not None:
        assert error["target"] == target, error
    return error


def reason_of(response: httpx.Response) -> str:
    """The 401's reason code (``KeyRevoked``, ``KeyExpired``, ``UserDisabled`` …)."""
    error = error_of(response, 401, "AuthenticationFailed", "Authorization")
    return str(error["details"][0]["code"])


def new_user(api: httpx.Client, srv: RunningServer, name: str, role: str | None = None) -> dict[str, Any]:
    """A user with one key (``{"id", "api_key", …}``) and, if given, a role on the default workspace."""
    created = api.post(PRINCIPALS, json={"name": name})
    assert created.status_code == 201, created.text
    key = api.post(f"{PRINCIPALS}/{name}/keys")
    assert key.status_code == 201, key.text
    if role:
        assigned = api.put(f"{srv.ws_path}/roleAssignments/{name}", json={"role": role})
        assert assigned.status_code == 200, assigned.text
    body: dict[str, Any] = key.json()
    return body


def token_of(srv: RunningServer, key: str) -> str:
    with srv.client(key) as client:
        response = client.post("/api/v1/auth/token")
        assert response.status_code == 200, response.text
        return str(response.json()["access_token"])


def status_with(srv: RunningServer, credential: str, path: str = "/api/v1/whoami") -> httpx.Response:
    with srv.client(credential) as client:
        return client.get(path)


def refused_within(
    srv: RunningServer, credential: str, bound: float, what: str
) -> tuple[httpx.Response, float]:
    """Wait (at most ``bound``) for the credential to be refused; the refusal and how long it took."""
    start = time.monotonic()
    response = wait_until(
        lambda: (r := status_with(srv, credential)).status_code == 401 and r, bound, what, interval=0.05
    )
    return response, time.monotonic() - start


def keys_of(api: httpx.Client, name: str) -> dict[str, dict[str, Any]]:
    response = api.get(f"{PRINCIPALS}/{name}/keys")
    assert response.status_code == 200, response.text
    return {k["id"]: k for k in response.json()["value"]}


# -- typed bodies ---------------------------------------------------------------------------
def test_is_admin_as_a_string_is_refused_naming_the_field(api: httpx.Client) -> None:
    error = error_of(
        api.post(PRINCIPALS, json={"name": "sneaky", "is_admin": "false"}), 400, "InvalidRequest"
    )
    assert error["target"] == "is_admin" and "true or false" in error["message"], error
    error_of(api.post(PRINCIPALS, json={"name": "sneaky", "is_admin": 1}), 400, "InvalidRequest", "is_admin")
    error_of(api.post(PRINCIPALS, json={"name": "sneaky", "admin": True}), 400, "InvalidRequest", "admin")
    error_of(api.post(PRINCIPALS, json={"name": "no spaces"}), 400, "InvalidRequest", "name")
    error_of(api.post(PRINCIPALS, json={"name": "x" * 129}), 400, "InvalidRequest", "name")
    error_of(api.post(PRINCIPALS, json={"name": "c.1@identity"}), 400, "InvalidRequest", "name")
    names = {p["name"] for p in api.get(PRINCIPALS).json()["value"]}
    assert "sneaky" not in names and "no spaces" not in names


def test_key_bodies_are_bounded(api: httpx.Client, srv: RunningServer) -> None:
    new_user(api, srv, "bounds")
    before = set(keys_of(api, "bounds"))
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    for body, target in [
        ({"expires_in_days": 0}, "expires_in_days"),
        ({"expires_in_days": 3651}, "expires_in_days"),
        ({"expires_in_days": "30"}, "expires_in_days"),
        ({"expires_in_days": 1.5}, "expires_in_days"),
        ({"expires_on": past}, "expires_on"),
        ({"expires_on": "soon"}, "expires_on"),
        ({"expires_in_days": 1, "expires_on": "2099-01-01T00:00:00Z"}, "expires_on"),
        ({"lifetime": 3}, "lifetime"),
    ]:
        response = api.post(f"{PRINCIPALS}/bounds/keys", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["target"] == target, (body, response.text)
    key_id = next(iter(before))
    for body, target in [
        ({"grace_minutes": 61}, "grace_minutes"),
        ({"grace_minutes": True}, "grace_minutes"),
    ]:
        response = api.post(f"{PRINCIPALS}/bounds/keys/{key_id}/rotate", json=body)
        assert response.status_code == 400 and response.json()["error"]["target"] == target, response.text
    assert set(keys_of(api, "bounds")) == before  # nothing half-created
    assert keys_of(api, "bounds")[key_id]["state"] == "Active"


# -- revocation -----------------------------------------------------------------------------
def test_a_revoked_key_and_the_tokens_minted_from_it_stop_working(
    api: httpx.Client, srv: RunningServer
) -> None:
    key = new_user(api, srv, "leaky", role="Reader")
    token = token_of(srv, key["api_key"])
    assert status_with(srv, key["api_key"], srv.ws_path).status_code == 200
    assert status_with(srv, token, srv.ws_path).status_code == 200  # both now cached by the server

    assert api.delete(f"{PRINCIPALS}/leaky/keys/{key['id']}").status_code == 204
    refused, took = refused_within(srv, key["api_key"], REVOCATION_BOUND_S, "the revoked key to be refused")
    assert reason_of(refused) == "KeyRevoked"
    assert (
        "revoked" in refused.json()["error"]["message"] and "key-create" in refused.json()["error"]["message"]
    )
    refused, took_token = refused_within(srv, token, REVOCATION_BOUND_S, "its token to be refused")
    assert reason_of(refused) == "KeyRevoked" and "minted from" in refused.json()["error"]["message"]
    assert max(took, took_token) <= REVOCATION_BOUND_S

    listed = keys_of(api, "leaky")[key["id"]]
    assert (listed["state"], listed["revoked"]) == ("Revoked", True) and listed["revoked_on"]
    # Revoking again changes nothing and says so with the same 204; an unknown key is a 404.
    assert api.delete(f"{PRINCIPALS}/leaky/keys/{key['id']}").status_code == 204
    error_of(api.delete(f"{PRINCIPALS}/leaky/keys/no-such-key"), 404, "ResourceNotFound")
    error_of(api.delete(f"{PRINCIPALS}/nobody/keys/{key['id']}"), 404, "ResourceNotFound")


def test_an_expired_key_is_refused_and_its_tokens_end_with_it(api: httpx.Client, srv: RunningServer) -> None:
    new_user(api, srv, "brief")
    expires_on = datetime.now(UTC) + timedelta(seconds=3)
    created = api.post(f"{PRINCIPALS}/brief/keys", json={"expires_on": expires_on.isoformat()})
    assert created.status_code == 201, created.text
    key = created.json()
    assert datetime.fromisoformat(key["expires_on"]) == expires_on
    assert status_with(srv, key["api_key"]).status_code == 200
    with srv.client(key["api_key"]) as client:
        minted = client.post("/api/v1/auth/token").json()
    assert minted["expires_on"] <= expires_on.timestamp()  # a token does not outlive its key

    refused, _ = refused_within(srv, key["api_key"], 3 + REVOCATION_BOUND_S, "the key to expire")
    assert reason_of(refused) == "KeyExpired" and "expired" in refused.json()["error"]["message"]
    assert reason_of(status_with(srv, minted["access_token"])) in ("KeyExpired", "TokenExpired")
    assert keys_of(api, "brief")[key["id"]]["state"] == "Expired"

    in_days = api.post(f"{PRINCIPALS}/brief/keys", json={"expires_in_days": 30}).json()
    lifetime = datetime.fromisoformat(in_days["expires_on"]) - datetime.now(UTC)
    assert timedelta(days=29, hours=23) < lifetime <= timedelta(days=30)


def test_rotation_replaces_the_key(api: httpx.Client, srv: RunningServer) -> None:
    old = new_user(api, srv, "rotor", role="Reader")
    rotated = api.post(f"{PRINCIPALS}/rotor/keys/{old['id']}/rotate")
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()
    assert new["api_key"].startswith("clk_") and new["replaces"] == old["id"] and new["id"] != old["id"]
    assert reason_of(status_with(srv, old["api_key"])) == "KeyRevoked"
    assert status_with(srv, new["api_key"], srv.ws_path).status_code == 200
    listed = keys_of(api, "rotor")
    assert listed[old["id"]]["replaced_by"] == new["id"] and listed[old["id"]]["state"] == "Revoked"
    assert listed[new["id"]]["state"] == "Active"
    assert "api_key" not in listed[new["id"]] and "key_hash" not in listed[new["id"]]
    # A revoked key cannot be rotated back to life.
    error_of(api.post(f"{PRINCIPALS}/rotor/keys/{old['id']}/rotate"), 409, "KeyRevoked")

    # With a grace, the old key keeps working until it runs out; the new one lives as long as
    # the old was meant to.
    lasting = api.post(f"{PRINCIPALS}/rotor/keys", json={"expires_in_days": 10}).json()
    graced = api.post(f"{PRINCIPALS}/rotor/keys/{lasting['id']}/rotate", json={"grace_minutes": 5}).json()
    ends = datetime.fromisoformat(graced["replaced_key_ends_on"])
    assert timedelta(minutes=4) < ends - datetime.now(UTC) <= timedelta(minutes=5)
    assert status_with(srv, lasting["api_key"]).status_code == 200
    assert status_with(srv, graced["api_key"]).status_code == 200
    new_life = datetime.fromisoformat(graced["expires_on"]) - datetime.now(UTC)
    assert timedelta(days=9, hours=23) < new_life <= timedelta(days=10)


def test_last_use_is_recorded(api: httpx.Client, srv: RunningServer) -> None:
    key = new_user(api, srv, "user-of-keys")
    assert keys_of(api, "user-of-keys")[key["id"]]["last_used_on"] is None
    before = datetime.now(UTC) - timedelta(seconds=1)
    assert status_with(srv, key["api_key"]).status_code == 200  # a GET: recorded outside its transaction
    used = keys_of(api, "user-of-keys")[key["id"]]["last_used_on"]
    assert used is not None and datetime.fromisoformat(used) >= before


# -- who may manage keys --------------------------------------------------------------------
def test_users_manage_their_own_keys_but_not_others(api: httpx.Client, srv: RunningServer) -> None:
    mine = new_user(api, srv, "selfie", role="Contributor")
    spare = api.post(f"{PRINCIPALS}/selfie/keys").json()
    other = new_user(api, srv, "other-user", role="Reader")
    with srv.client(mine["api_key"]) as me:
        assert set(k["id"] for k in me.get(f"{PRINCIPALS}/selfie/keys").json()["value"]) == {
            mine["id"],
            spare["id"],
        }
        # Others' keys are not disclosed (404, as a workspace without a role), nor is the user list.
        error_of(me.get(f"{PRINCIPALS}/other-user/keys"), 404, "ResourceNotFound")
        error_of(me.delete(f"{PRINCIPALS}/other-user/keys/{other['id']}"), 404, "ResourceNotFound")
        error_of(me.post(f"{PRINCIPALS}/other-user/keys/{other['id']}/rotate"), 404, "ResourceNotFound")
        error_of(me.post(f"{PRINCIPALS}/other-user/keys"), 404, "ResourceNotFound")
        error_of(me.get(PRINCIPALS), 403, "AuthorizationFailed")
        error_of(me.post(PRINCIPALS, json={"name": "mine-too"}), 403, "AuthorizationFailed")
        error_of(me.patch(f"{PRINCIPALS}/other-user", json={"enabled": False}), 403, "AuthorizationFailed")
        # Creating keys is for administrators: a leaked key must not mint itself a second life.
        error = error_of(me.post(f"{PRINCIPALS}/selfie/keys"), 403, "AuthorizationFailed")
        assert "key-rotate" in error["message"]
        assert me.delete(f"{PRINCIPALS}/selfie/keys/{spare['id']}").status_code == 204
        rotated = me.post(f"{PRINCIPALS}/selfie/keys/{mine['id']}/rotate")
        assert rotated.status_code == 201, rotated.text
    assert status_with(srv, other["api_key"]).status_code == 200
    assert reason_of(status_with(srv, mine["api_key"])) == "KeyRevoked"
    assert status_with(srv, rotated.json()["api_key"], srv.ws_path).status_code == 200
    assert len(keys_of(api, "selfie")) == 3


def test_the_last_administrator_cannot_lock_everyone_out(api: httpx.Client, srv: RunningServer) -> None:
    admin_keys = [k for k in keys_of(api, "admin").values() if k["state"] == "Active"]
    assert len(admin_keys) == 1
    error = error_of(
        api.delete(f"{PRINCIPALS}/admin/keys/{admin_keys[0]['id']}"), 409, "LastAdministratorKey"
    )
    assert "key-create" in error["message"]
    error_of(api.patch(f"{PRINCIPALS}/admin", json={"enabled": False}), 409, "CannotDisableSelf")
    assert api.get("/api/v1/whoami").status_code == 200


# -- users ----------------------------------------------------------------------------------
def test_a_disabled_user_cannot_authenticate_until_enabled(api: httpx.Client, srv: RunningServer) -> None:
    key = new_user(api, srv, "leaver", role="Reader")
    token = token_of(srv, key["api_key"])
    disabled = api.patch(f"{PRINCIPALS}/leaver", json={"enabled": False})
    assert disabled.status_code == 200 and disabled.json()["enabled"] is False, disabled.text
    for credential in (key["api_key"], token):
        refused, _ = refused_within(srv, credential, REVOCATION_BOUND_S, "the disabled user to be refused")
        assert (
            reason_of(refused) == "UserDisabled"
            and "user enable leaver" in refused.json()["error"]["message"]
        )
    error_of(api.post(f"{PRINCIPALS}/leaver/keys"), 409, "UserDisabled")
    error_of(api.patch(f"{PRINCIPALS}/leaver", json={"enabled": "yes"}), 400, "InvalidRequest", "enabled")
    listed = {p["name"]: p for p in api.get(PRINCIPALS).json()["value"]}
    assert listed["leaver"]["enabled"] is False and listed["leaver"]["disabled_on"]

    assert api.patch(f"{PRINCIPALS}/leaver", json={"enabled": True}).json()["enabled"] is True
    assert status_with(srv, key["api_key"], srv.ws_path).status_code == 200
    error_of(api.patch(f"{PRINCIPALS}/nobody", json={"enabled": True}), 404, "ResourceNotFound")


# -- role assignments -----------------------------------------------------------------------
def test_removing_a_role_takes_the_workspace_away(api: httpx.Client, srv: RunningServer) -> None:
    key = new_user(api, srv, "short-stay", role="Contributor")
    owner = new_user(api, srv, "ws-owner", role="Owner")
    assert status_with(srv, key["api_key"], srv.ws_path).status_code == 200
    roles = {r["principal"]: r["role"] for r in api.get(f"{srv.ws_path}/roleAssignments").json()["value"]}
    assert roles["short-stay"] == "Contributor" and roles["ws-owner"] == "Owner"

    with srv.client(key["api_key"]) as contributor:
        # A Contributor may neither list nor remove assignments.
        error_of(contributor.get(f"{srv.ws_path}/roleAssignments"), 403, "AuthorizationFailed")
        error_of(contributor.delete(f"{srv.ws_path}/roleAssignments/ws-owner"), 403, "AuthorizationFailed")
    with srv.client(owner["api_key"]) as ws_owner:
        assert "short-stay" in {
            r["principal"] for r in ws_owner.get(f"{srv.ws_path}/roleAssignments").json()["value"]
        }
        assert ws_owner.delete(f"{srv.ws_path}/roleAssignments/short-stay").status_code == 204
        error_of(ws_owner.delete(f"{srv.ws_path}/roleAssignments/short-stay"), 404, "ResourceNotFound")
        error_of(ws_owner.delete(f"{srv.ws_path}/roleAssignments/nobody"), 404, "ResourceNotFound")

    refused = wait_until(
        lambda: (r := status_with(srv, key["api_key"], srv.ws_path)).status_code == 404 and r,
        REVOCATION_BOUND_S,
        "the workspace to disappear for the removed user",
    )
    error_of(refused, 404, "ResourceNotFound")
    with srv.client(key["api_key"]) as gone:
        assert gone.get("/api/v1/workspaces").json()["value"] == []
        error_of(gone.get(f"{srv.ws_path}/roleAssignments"), 404, "ResourceNotFound")
    error_of(
        api.put(f"{srv.ws_path}/roleAssignments/ws-owner", json={"role": "King"}),
        400,
        "ValidationError",
        "role",
    )
    error_of(
        api.put(f"{srv.ws_path}/roleAssignments/ws-owner", json={"role": "Owner", "x": 1}),
        400,
        "InvalidRequest",
    )
    assert {r["principal"]: r["role"] for r in api.get(f"{srv.ws_path}/roleAssignments").json()["value"]}[
        "ws-owner"
    ] == "Owner"


def test_whoami_names_the_key(api: httpx.Client, srv: RunningServer) -> None:
    key = new_user(api, srv, "curious")
    assert status_with(srv, key["api_key"]).json()["key_id"] == key["id"]
    assert status_with(srv, token_of(srv, key["api_key"])).json()["key_id"] == key["id"]
    assert reason_of(status_with(srv, "clk_not-a-real-key")) == "UnknownKey"
    assert reason_of(status_with(srv, "bogus")) == "Malformed"


def test_revoking_a_key_ends_the_browser_sign_in_made_with_it(api: httpx.Client, srv: RunningServer) -> None:
    """The instance proxy's sign-in cookie is tied to the key it was made with."""
    key = new_user(api, srv, "browser", role="Reader")
    with httpx.Client(base_url=srv.endpoint, timeout=10) as browser:
        signed_in = browser.post("/signin", data={"api_key": key["api_key"], "next": "/instances/"})
        assert signed_in.status_code == 303, signed_in.text
        assert browser.cookies.get("cloudlet_signin", path="/instances/")
        # Signed in: an unknown instance is a 404 (not a 401) for this caller.
        assert browser.get("/instances/ghost/jupyterlab/api/status").status_code == 404
        # The cookie is no API credential.
        cookie = browser.cookies.get("cloudlet_signin", path="/instances/")
        as_bearer = httpx.get(f"{srv.endpoint}/api/v1/whoami", headers={"Authorization": f"Bearer {cookie}"})
        assert as_bearer.status_code == 401
        assert api.delete(f"{PRINCIPALS}/browser/keys/{key['id']}").status_code == 204
        wait_until(
            lambda: browser.get("/instances/ghost/jupyterlab/api/status").status_code == 401,
            REVOCATION_BOUND_S + 2,
            "the sign-in to end with its key",
        )
