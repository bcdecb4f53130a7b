"""Locations over HTTP against a real server: each names a provider from the registry and that
provider's configuration (checked: a 400 names the field), shows both, and its nodes are made by
the provider its configuration describes; nodes are reached at the address their agent reported."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, delete_compute, nodes, served, wait_until

LOCATIONS = "/api/v1/locations"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "locations")


@pytest.fixture
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def refused(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def test_the_registered_providers_are_listed_with_their_settings(api: httpx.Client) -> None:
    [local] = [p for p in api.get("/api/v1/providers").json()["value"] if p["name"] == "local"]
    assert {"nodes_dir", "env_cache", "cgroups"} <= set(local["config_schema"]["properties"])
    assert local["config_schema"]["additionalProperties"] is False and local["secret_fields"] == []


def test_a_location_keeps_its_provider_and_configuration(api: httpx.Client, tmp_path: Path) -> None:
    nodes_dir = str(tmp_path / "nodes-a")
    made = api.put(f"{LOCATIONS}/cfg-a", json={"provider": "local", "config": {"nodes_dir": nodes_dir}})
    assert made.status_code == 201, made.text
    assert made.json()["provider"] == "local" and made.json()["config"] == {"nodes_dir": nodes_dir}
    assert api.get(f"{LOCATIONS}/cfg-a").json() == made.json()
    listed = {loc["name"]: loc for loc in api.get(LOCATIONS).json()["value"]}
    assert listed["cfg-a"]["config"] == {"nodes_dir": nodes_dir} and listed["local"]["config"] == {}

    # A capacity change keeps the configuration; a new configuration replaces it.
    kept = api.put(f"{LOCATIONS}/cfg-a", json={"capacity": {"vcpus": 16}})
    assert kept.status_code == 200 and kept.json()["config"] == {"nodes_dir": nodes_dir}
    assert kept.json()["capacity"]["vcpus"] == 16
    replaced = api.put(f"{LOCATIONS}/cfg-a", json={"config": {"cgroups": False}}).json()
    assert replaced["config"] == {"cgroups": False} and replaced["capacity"]["vcpus"] == 16


def test_a_bad_provider_or_configuration_is_a_400_naming_the_field(api: httpx.Client) -> None:
    error = refused(api.put(f"{LOCATIONS}/cfg-bad", json={"provider": "nosuch"}))
    assert error["target"] == "provider" and "local" in error["message"]
    error = refused(api.put(f"{LOCATIONS}/cfg-bad", json={"config": {"nodes_directory": "/x"}}))
    assert error["target"] == "config.nodes_directory" and "nodes_dir" in error["message"]
    error = refused(api.put(f"{LOCATIONS}/cfg-bad", json={"config": {"nodes_dir": "relative"}}))
    assert error["target"] == "config.nodes_dir"
    refused(api.get(f"{LOCATIONS}/cfg-bad"), 404)  # nothing was made


def test_a_location_nothing_uses_can_be_deleted_and_one_in_use_cannot(api: httpx.Client) -> None:
    assert api.put(f"{LOCATIONS}/cfg-gone", json={}).status_code == 201
    assert api.delete(f"{LOCATIONS}/cfg-gone").status_code == 204
    refused(api.get(f"{LOCATIONS}/cfg-gone"), 404)
    refused(api.delete(f"{LOCATIONS}/cfg-gone"), 404)
    error = refused(api.delete(f"{LOCATIONS}/local"), 409)
    assert error["code"] == "LocationInUse" and "resource group" in error["message"]


def test_nodes_are_made_by_their_locations_configured_provider_and_reached_at_their_address(
    api: httpx.Client, srv: RunningServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    nodes_dir = tmp_path_factory.mktemp("lab-nodes")
    made = api.put(f"{LOCATIONS}/lab", json={"provider": "local", "config": {"nodes_dir": str(nodes_dir)}})
    assert made.status_code == 201, made.text
    body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 1, "max_instances": 1}
    create_compute(api, srv, "lab-cluster", {**body, "location": "lab"})
    try:
        [node] = wait_until(
            lambda: [n for n in nodes(api, srv, "lab-cluster") if n["state"] == "idle"] or None,
            60,
            "the lab cluster's node to be idle",
        )
        assert (nodes_dir / node["nodeId"] / "agent.log").exists()  # made under the lab's nodes_dir
        assert not (srv.home / "nodes" / node["nodeId"]).exists()
        assert node["privateIpAddress"] == "127.0.0.1"  # what its agent reported (the local provider's)
        refused(api.delete(f"{LOCATIONS}/lab"), 409)
    finally:
        delete_compute(api, srv, "lab-cluster")
