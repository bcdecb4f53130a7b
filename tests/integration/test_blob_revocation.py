"""Issue 24, defect 3: a Blob signature (``services/assets/blob_sas.py``) is checked against its issuer's
standing on every use. Revoking the key it was issued under, disabling the user or removing their
role refuses it within the caller cache period, as for access tokens; a role lowered to Reader
leaves it read-only; a Reader's signature never writes or deletes; it lives minutes, not an hour.

The tests wait for the refusal with a deadline (``wait_until``); they never sleep first."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest

from cloudlet.services.access.identity import CALLER_CACHE_TTL_S
from cloudlet.services.assets import blob_sas
from tests.conftest import RunningServer
from tests.integration.test_access import PRINCIPALS, new_user
from tests.jobs_helpers import served, wait_until

REVOCATION_BOUND_S = CALLER_CACHE_TTL_S + 3  # a loaded machine's latency on top of the bound
STORE = "workspaceblobstore"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "blob-revocation")


def arm_ws(srv: RunningServer) -> str:
    return (
        f"/subscriptions/{srv.subscription_id}/resourceGroups/default"
        "/providers/Microsoft.MachineLearningServices/workspaces/default"
    )


class Signed:
    """A datastore signature a user got from listSecrets, and plain Blob requests with it."""

    def __init__(self, srv: RunningServer, key: str) -> None:
        with srv.client(key) as client:
            store = client.get(f"{arm_ws(srv)}/datastores/{STORE}")
            assert store.status_code == 200, store.text
            account = store.json()["properties"]["accountName"].split("/blob/", 1)[1].rstrip("#")
            secrets = client.post(f"{arm_ws(srv)}/datastores/{STORE}/listSecrets")
            assert secrets.status_code == 200, secrets.text
        self.sas: str = secrets.json()["sasToken"]
        self.fields = dict(parse_qsl(self.sas))
        self.base = f"{srv.endpoint}/blob/{account}/{STORE}"

    def call(self, method: str, blob: str, content: bytes | None = None) -> tuple[int, str]:
        headers = {"x-ms-blob-type": "BlockBlob"} if method == "PUT" else {}
        response = httpx.request(
            method, f"{self.base}/{blob}?{self.sas}", content=content, headers=headers, timeout=30
        )
        return response.status_code, response.headers.get("x-ms-error-code", "")

    def put(self, blob: str) -> tuple[int, str]:
        return self.call("PUT", blob, b"data")

    def get(self, blob: str) -> tuple[int, str]:
        return self.call("GET", blob)

    def delete(self, blob: str) -> tuple[int, str]:
        return self.call("DELETE", blob)


def refused_within_bound(what: str, attempt: Any, code: str) -> float:
    """Wait (with a deadline) until ATTEMPT() answers 403 with CODE; the seconds it took."""
    started = time.monotonic()
    wait_until(lambda: attempt() == (403, code), REVOCATION_BOUND_S, what)
    return time.monotonic() - started


def test_a_signature_is_short_lived_and_names_its_issuer(srv: RunningServer) -> None:
    with srv.client() as api:
        user = new_user(api, srv, "sas-short", "Contributor")
    signed = Signed(srv, user["api_key"])
    expiry = datetime.strptime(signed.fields["se"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert expiry - datetime.now(UTC) <= blob_sas.DEFAULT_TTL <= timedelta(minutes=15)
    assert signed.fields["sktid"] == user["id"] and signed.fields["skoid"].isdigit()
    assert signed.put("short/a.txt")[0] == 201


def test_revoking_the_key_ends_its_signatures(srv: RunningServer) -> None:
    with srv.client() as api:
        user = new_user(api, srv, "sas-revoked", "Contributor")
    signed = Signed(srv, user["api_key"])
    assert signed.put("revoked/a.txt")[0] == 201
    assert signed.get("revoked/a.txt")[0] == 200  # and now its issuer's standing is cached
    with srv.client() as api:
        assert api.delete(f"{PRINCIPALS}/sas-revoked/keys/{user['id']}").status_code == 204
    took = refused_within_bound(
        "the revoked key's signature to be refused",
        lambda: signed.get("revoked/a.txt"),
        "AuthenticationFailed",
    )
    assert took <= REVOCATION_BOUND_S
    for refused in (signed.put("revoked/b.txt"), signed.delete("revoked/a.txt")):
        assert refused == (403, "AuthenticationFailed")


def test_disabling_the_user_ends_their_signatures(srv: RunningServer) -> None:
    with srv.client() as api:
        user = new_user(api, srv, "sas-disabled", "Contributor")
    signed = Signed(srv, user["api_key"])
    assert signed.put("disabled/a.txt")[0] == 201
    with srv.client() as api:
        patched = api.patch(f"{PRINCIPALS}/sas-disabled", json={"enabled": False})
        assert patched.status_code == 200, patched.text
    refused_within_bound(
        "the disabled user's signature to be refused",
        lambda: signed.put("disabled/b.txt"),
        "AuthenticationFailed",
    )


def test_a_lowered_role_leaves_a_signature_read_only_and_a_removed_one_ends_it(srv: RunningServer) -> None:
    with srv.client() as api:
        new_user(api, srv, "sas-demoted", "Contributor")
        key = api.post(f"{PRINCIPALS}/sas-demoted/keys").json()["api_key"]
    signed = Signed(srv, key)
    assert signed.fields["sp"] == blob_sas.ALL_PERMISSIONS
    assert signed.put("demoted/a.txt")[0] == 201
    with srv.client() as api:
        lowered = api.put(f"{srv.ws_path}/roleAssignments/sas-demoted", json={"role": "Reader"})
        assert lowered.status_code == 200, lowered.text
    refused_within_bound(
        "the demoted user's signature to stop writing",
        lambda: signed.put("demoted/b.txt"),
        "AuthorizationPermissionMismatch",
    )
    assert signed.delete("demoted/a.txt") == (403, "AuthorizationPermissionMismatch")
    assert signed.get("demoted/a.txt")[0] == 200  # a Reader still reads
    with srv.client() as api:
        assert api.delete(f"{srv.ws_path}/roleAssignments/sas-demoted").status_code == 204
    refused_within_bound(
        "the signature of a user with no role to be refused",
        lambda: signed.get("demoted/a.txt"),
        "AuthorizationFailure",
    )


def test_a_readers_signature_reads_and_never_writes_or_deletes(srv: RunningServer) -> None:
    with srv.client() as api:
        writer = new_user(api, srv, "sas-writer", "Contributor")
        reader = new_user(api, srv, "sas-reader", "Reader")
    assert Signed(srv, writer["api_key"]).put("shared/a.txt")[0] == 201
    signed = Signed(srv, reader["api_key"])
    assert signed.fields["sp"] == blob_sas.READ_PERMISSIONS
    assert signed.get("shared/a.txt")[0] == 200
    assert signed.put("shared/b.txt") == (403, "AuthorizationPermissionMismatch")
    assert signed.delete("shared/a.txt") == (403, "AuthorizationPermissionMismatch")
    # Claiming more in the query breaks the signature rather than widening it.
    widened = signed.sas.replace(f"sp={blob_sas.READ_PERMISSIONS}", f"sp={blob_sas.ALL_PERMISSIONS}")
    response = httpx.delete(f"{signed.base}/shared/a.txt?{widened}", timeout=30)
    assert response.status_code == 403 and response.headers["x-ms-error-code"] == "AuthenticationFailed"
