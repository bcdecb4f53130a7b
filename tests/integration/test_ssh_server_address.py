"""The documented set-up for SSH hosts across a network (docs/providers.md, "Across a network"):
the server on ``--host 0.0.0.0`` and the location's ``server_address`` set to the address the hosts
reach it at. The hosts are real sshd hosts in network namespaces (tests/netns_hosts.py) whose
agents dial that address over TLS and check the server's certificate against its CA: the
certificate must name ``server_address`` (re-issued, and taken up by the running server, when a
location names a new one). Two hosts of 2 cores each are a location of 4 vCPUs: a node on each."""

from __future__ import annotations

import socket
import ssl
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests import netns_hosts
from tests.conftest import RunningServer
from tests.jobs_helpers import (
    create_compute,
    delete_compute,
    log_text,
    nodes,
    served,
    submit,
    wait_job,
    wait_until,
)

NET = netns_hosts.HostNet(bridge="brsa", prefix="clsa", subnet="10.77.8", user_prefix="clsau")
LOCATION = "sa-lab"
SIZE = "Standard_DS2_v2"  # 2 vCPUs: a namespace host's 2 cores, so each node takes a host

pytestmark = pytest.mark.skipif(netns_hosts.missing() is not None, reason=str(netns_hosts.missing()))


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[netns_hosts.SshHost]]:
    with netns_hosts.temporary_hosts(2, "clsa-", NET) as made:
        yield made


@pytest.fixture(scope="module")
def srv(
    hosts: list[netns_hosts.SshHost], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "ssh-server-address", host="0.0.0.0")


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def handshake(srv: RunningServer, address: str) -> str | None:
    """None when a TLS client that trusts the server's CA accepts its certificate for ADDRESS
    (what an agent dialing https://ADDRESS checks), else why not."""
    port = urllib.parse.urlsplit(srv.https_url).port
    assert port is not None
    context = ssl.create_default_context(cafile=srv.ca_file)
    try:
        with (
            socket.create_connection((address, port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname=address),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        return str(exc)


def test_server_on_all_addresses_with_server_address_runs_a_job_on_each_host(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost]
) -> None:
    address = NET.bridge_address
    # The bind host (0.0.0.0) names no address the hosts could check the certificate against.
    assert "mismatch" in (handshake(srv, address) or "")
    config = {"hosts": [h.as_config() for h in hosts], "server_address": address}
    made = api.put(f"/api/v1/locations/{LOCATION}", json={"provider": "ssh", "config": config})
    assert made.status_code == 201, made.text
    # The running server re-issues its certificate (same CA) and serves it without a restart.
    wait_until(lambda: handshake(srv, address) is None, 30, f"the server's certificate to name {address}")
    name = "sa-cpu"
    body = {
        "type": "amlcompute",
        "size": SIZE,
        "location": LOCATION,
        "min_instances": 2,
        "max_instances": 3,
        "idle_time_before_scale_down": 60,
    }
    create_compute(api, srv, name, body)
    try:
        addresses = {h.address for h in hosts}

        def one_idle_per_host() -> list[dict[str, Any]] | None:
            listed = nodes(api, srv, name)
            idle = {n["privateIpAddress"] for n in listed if n["nodeState"] == "idle"}
            return listed if idle == addresses else None

        seen = wait_until(one_idle_per_host, 180, "an idle node on each of the 2 hosts")
        assert len(seen) == 2, seen
        # Three jobs for two hosts: the cluster may grow to 3 nodes, but the location is the two
        # hosts' 2 + 2 cores as the SSH provider reports them (a location counted as one host's
        # 2 vCPUs would say "4/2").
        jobs = [f"sa-job-{i}" for i in range(3)]
        for j in jobs:
            submit(
                api, srv, j, {"command": "echo ran on $(hostname -I); sleep 8", "compute": f"azureml:{name}"}
            )
        full = "capacity 4/4 vCPUs in use (as its provider reports)"

        def blocked() -> str | None:
            message = str(api.get(f"{srv.ws_path}/computes/{name}").json()["status_message"])
            return message if full in message else None

        wait_until(blocked, 60, f"the compute's status to say '{full}'")
        done = [wait_job(api, srv, j, timeout=120) for j in jobs]
        assert [d["status"] for d in done] == ["Completed"] * 3, done
        ran_on = {log_text(api, srv, j).split("ran on ", 1)[1].split()[0] for j in jobs}
        assert ran_on == addresses
    finally:
        delete_compute(api, srv, name)
