"""The revocation bound across replicas: a key revoked through one server stops working on another
(which had just cached it) within ``CALLER_CACHE_TTL_S``, and so do the tokens minted from it and
the storage signatures issued under it."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from cloudlet.services.access.identity import CALLER_CACHE_TTL_S
from tests.conftest import RunningServer
from tests.jobs_helpers import wait_until

MARGIN_S = 3.0  # request latency on a loaded machine; the wait is for the refusal, not a sleep


def _status(server: RunningServer, credential: str) -> int:
    with server.client(credential) as client:
        return client.get(server.ws_path).status_code


@pytest.mark.postgres
def test_a_key_revoked_on_one_replica_is_refused_by_another_within_the_bound(
    server_factory: Callable[..., RunningServer], postgres_url: str
) -> None:
    a = server_factory(db_url=postgres_url)
    b = server_factory(db_url=postgres_url, api_key=a.api_key)
    with a.client() as admin:
        assert admin.post("/api/v1/principals", json={"name": "roamer"}).status_code == 201
        key = admin.post("/api/v1/principals/roamer/keys").json()
        assigned = admin.put(f"{a.ws_path}/roleAssignments/roamer", json={"role": "Reader"})
        assert assigned.status_code == 200, assigned.text
    with httpx.Client(base_url=a.endpoint, headers={"Authorization": f"Bearer {key['api_key']}"}) as roamer:
        token = roamer.post("/api/v1/auth/token").json()["access_token"]
    # B resolves (and caches) both credentials just before A revokes the key.
    assert (_status(b, key["api_key"]), _status(b, token)) == (200, 200)
    with a.client() as admin:
        assert admin.delete(f"/api/v1/principals/roamer/keys/{key['id']}").status_code == 204
    revoked_at = time.monotonic()
    assert _status(a, key["api_key"]) == 401  # the replica that revoked it: at once

    bound = CALLER_CACHE_TTL_S + MARGIN_S
    wait_until(lambda: _status(b, key["api_key"]) == 401, bound, "replica B to refuse the revoked key")
    wait_until(lambda: _status(b, token) == 401, bound, "replica B to refuse the key's token")
    assert time.monotonic() - revoked_at <= bound


def _blob_status(server: RunningServer, sas: str) -> tuple[int, str]:
    url = f"{server.endpoint}/blob/ws1/workspaceblobstore/never-there.txt?{sas}"
    response = httpx.get(url, timeout=30)
    return response.status_code, response.headers.get("x-ms-error-code", "")


@pytest.mark.postgres
def test_a_storage_signature_dies_with_its_key_on_every_replica_within_the_bound(
    server_factory: Callable[..., RunningServer], postgres_url: str
) -> None:
    """Issue 24, defect 3: a Blob signature is checked against its issuer on every use, through the
    same cache as tokens: revoked through A, refused by B (which had just served it) in time."""
    a = server_factory(db_url=postgres_url)
    b = server_factory(db_url=postgres_url, api_key=a.api_key)
    arm = (
        f"/subscriptions/{a.subscription_id}/resourceGroups/default"
        "/providers/Microsoft.MachineLearningServices/workspaces/default/datastores/workspaceblobstore"
    )
    with a.client() as admin:
        assert admin.post("/api/v1/principals", json={"name": "signer"}).status_code == 201
        key = admin.post("/api/v1/principals/signer/keys").json()
        assigned = admin.put(f"{a.ws_path}/roleAssignments/signer", json={"role": "Contributor"})
        assert assigned.status_code == 200, assigned.text
        account = admin.get(arm).json()["properties"]["accountName"].split("/blob/", 1)[1].rstrip("#")
    assert account == "ws1"
    with a.client(key["api_key"]) as signer:
        sas = signer.post(f"{arm}/listSecrets").json()["sasToken"]
    # B serves (and caches) the signature's issuer just before A revokes the key: a missing blob.
    assert _blob_status(b, sas) == (404, "BlobNotFound")
    with a.client() as admin:
        assert admin.delete(f"/api/v1/principals/signer/keys/{key['id']}").status_code == 204
    revoked_at = time.monotonic()
    assert _blob_status(a, sas) == (403, "AuthenticationFailed")  # the replica that revoked it: at once
    bound = CALLER_CACHE_TTL_S + MARGIN_S
    wait_until(
        lambda: _blob_status(b, sas) == (403, "AuthenticationFailed"), bound, "replica B to refuse the SAS"
    )
    assert time.monotonic() - revoked_at <= bound
