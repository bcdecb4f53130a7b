"""Acceptance: the Python client (``cloudlet.client.MLClient``) against a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cloudlet.client import (
    AmlCompute,
    ComputeInstance,
    HttpResponseError,
    MLClient,
    ResourceExistsError,
    ResourceNotFoundError,
)
from tests.conftest import RunningServer
from tests.jobs_helpers import served


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "client")


@pytest.fixture
def ml_client(srv: RunningServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[MLClient]:
    """Configured from the server's home only (config.json + credentials), as a user would be."""
    for var in ("CLOUDLET_ENDPOINT", "CLOUDLET_API_KEY", "CLOUDLET_HOME"):
        monkeypatch.delenv(var, raising=False)
    with MLClient(home=srv.home) as client:
        yield client


def test_begin_create_or_update_cluster(ml_client: MLClient, api: httpx.Client, srv: RunningServer) -> None:
    assert ml_client.endpoint == srv.endpoint
    cluster = AmlCompute(name="py-cluster", size="STANDARD_DS3_v2", min_instances=0, max_instances=2)
    poller = ml_client.compute.begin_create_or_update(cluster)
    assert poller.operation_id
    result = poller.result()
    assert isinstance(result, AmlCompute)
    assert (result.name, result.size, result.provisioning_state) == (
        "py-cluster",
        "Standard_DS3_v2",
        "Succeeded",
    )
    assert (result.min_instances, result.max_instances) == (0, 2)
    assert poller.status() == "Succeeded"

    on_server = api.get(f"{srv.ws_path}/computes/py-cluster").json()
    assert (on_server["provisioning_state"], on_server["max_instances"]) == ("Succeeded", 2)
    assert "py-cluster" in [c.name for c in ml_client.compute.list()]

    # Same name again: an update (create-or-update semantics).
    grown = ml_client.compute.begin_create_or_update(
        AmlCompute(name="py-cluster", size="Standard_DS3_v2", min_instances=0, max_instances=3)
    ).result()
    assert isinstance(grown, AmlCompute) and grown.max_instances == 3
    assert api.get(f"{srv.ws_path}/computes/py-cluster").json()["max_instances"] == 3


def test_explicit_endpoint_and_key(
    srv: RunningServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No home at all: everything passed as arguments."""
    for var in ("CLOUDLET_ENDPOINT", "CLOUDLET_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDLET_HOME", str(tmp_path / "empty-home"))
    with MLClient(srv.api_key, srv.subscription_id, "default", "default", endpoint=srv.endpoint) as client:
        instance = client.begin_create_or_update(
            ComputeInstance(name="py-ci", size="Standard_DS3_v2")
        ).result()
        assert (instance.state, instance.owner) == ("Running", "admin")
        client.compute.begin_stop("py-ci").result()
        assert client.compute.get("py-ci").state == "Stopped"
        usage = {u.name: u for u in client.compute.list_usage()}
        holders = {h["compute"]: h for h in usage["standardDSv2Family"].holders}
        assert holders["py-ci"]["state"] == "Stopped"


def test_errors_are_typed(ml_client: MLClient, api: httpx.Client, srv: RunningServer) -> None:
    with pytest.raises(ResourceNotFoundError) as missing:
        ml_client.compute.get("py-missing")
    assert missing.value.status_code == 404
    assert missing.value.error.code == "ResourceNotFound"

    with pytest.raises(HttpResponseError) as retired:
        ml_client.compute.begin_create_or_update(
            AmlCompute(name="py-old", size="Standard_NC6s_v3", max_instances=1)
        )
    assert (retired.value.status_code, retired.value.error.code, retired.value.target) == (
        400,
        "RetiredVmSeries",
        "size",
    )
    assert api.get(f"{srv.ws_path}/computes/py-old").status_code == 404

    ml_client.compute.begin_create_or_update(AmlCompute(name="py-sized", size="Standard_DS3_v2")).result()
    with pytest.raises(ResourceExistsError) as conflict:
        ml_client.compute.begin_create_or_update(AmlCompute(name="py-sized", size="Standard_D2_v2"))
    assert (conflict.value.error.code, conflict.value.target) == ("ImmutableFieldChange", "size")

    ml_client.compute.begin_delete("py-sized").result()
    with pytest.raises(ResourceNotFoundError):
        ml_client.compute.get("py-sized")
