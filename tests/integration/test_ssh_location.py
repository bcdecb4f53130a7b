"""SSH hosts as a location, against real sshd hosts in network namespaces (tests/netns_hosts.py).

The server listens on the bridge's address (10.77.1.1), so the hosts' agents dial it over TLS
across the (virtual) network; nodes are reached at their host's address, not 127.0.0.1."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import netns_hosts
from tests.conftest import RunningServer
from tests.jobs_helpers import (
    TERMINAL,
    create_compute,
    delete_compute,
    job,
    log_text,
    nodes,
    served,
    submit,
    wait_job,
    wait_until,
)

LOCATIONS = "/api/v1/locations"
HOSTS = 4
SIZE = "Standard_DS2_v2"  # 2 vCPUs: as many as a namespace host has, so a node takes a host whole

pytestmark = pytest.mark.skipif(netns_hosts.missing() is not None, reason=str(netns_hosts.missing()))


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[netns_hosts.SshHost]]:
    with netns_hosts.temporary_hosts(HOSTS, "clssh-") as made:
        yield made


@pytest.fixture(scope="module")
def srv(
    hosts: list[netns_hosts.SshHost], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "ssh-location", host=netns_hosts.BRIDGE_ADDRESS)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def ssh_config(hosts: list[netns_hosts.SshHost]) -> dict[str, Any]:
    return {"hosts": [h.as_config() for h in hosts]}


@pytest.fixture(scope="module")
def location(api: httpx.Client, hosts: list[netns_hosts.SshHost]) -> str:
    made = api.put(f"{LOCATIONS}/lab-ssh", json={"provider": "ssh", "config": ssh_config(hosts)})
    assert made.status_code == 201, made.text
    return "lab-ssh"


def cluster(location: str, max_instances: int = HOSTS, idle: int = 5) -> dict[str, Any]:
    return {
        "type": "amlcompute",
        "size": SIZE,
        "location": location,
        "min_instances": 0,
        "max_instances": max_instances,
        "idle_time_before_scale_down": idle,
    }


def refused(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


# -- configuration ----------------------------------------------------------------------------
def test_a_bad_ssh_configuration_is_a_400_naming_the_field(
    api: httpx.Client, hosts: list[netns_hosts.SshHost]
) -> None:
    good = hosts[0].as_config()
    error = refused(api.put(f"{LOCATIONS}/ssh-bad", json={"provider": "ssh", "config": {"hosts": []}}))
    assert error["target"] == "config.hosts"
    bad = {"hosts": [{**good, "passwd": "x"}]}
    error = refused(api.put(f"{LOCATIONS}/ssh-bad", json={"provider": "ssh", "config": bad}))
    assert error["target"] == "config.hosts.0.passwd" and "identity_file" in error["message"]
    missing = {"hosts": [{**good, "identity_file": "/nonexistent/id_ed25519"}]}
    error = refused(api.put(f"{LOCATIONS}/ssh-bad", json={"provider": "ssh", "config": missing}))
    assert error["target"] == "config.hosts.0.identity_file" and "/nonexistent/id_ed25519" in error["message"]
    error = refused(api.put(f"{LOCATIONS}/ssh-bad", json={"provider": "ssh", "config": {"host": [good]}}))
    assert error["target"] == "config.host" and "hosts" in error["message"]
    assert api.get(f"{LOCATIONS}/ssh-bad").status_code == 404  # nothing half-made


def test_an_unreachable_host_makes_the_nodes_status_say_why(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost]
) -> None:
    nowhere = {**hosts[0].as_config(), "address": f"{netns_hosts.SUBNET}.250"}
    config = {"hosts": [nowhere], "connect_timeout_s": 2}
    made = api.put(f"{LOCATIONS}/ssh-nowhere", json={"provider": "ssh", "config": config})
    assert made.status_code == 201, made.text
    name = "ssh-nowhere-c"
    body = {**cluster("ssh-nowhere", max_instances=1), "min_instances": 1}
    create_compute(api, srv, name, body)
    try:

        def why() -> str | None:
            seen = api.get(f"{srv.ws_path}/computes/{name}").json()
            text = repr(seen) + repr(nodes(api, srv, name))
            return text if f"{netns_hosts.SUBNET}.250" in text else None

        text = wait_until(why, 90, "the node's status to name the unreachable host")
        assert "timed out" in text or "cannot connect" in text or "reachable" in text, text
    finally:
        delete_compute(api, srv, name)


# -- scale 0 -> 4 -> 0 across 4 hosts ----------------------------------------------------------
def test_a_cluster_scales_from_zero_to_a_node_per_host_and_back(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost], location: str
) -> None:
    name = "ssh-scale"
    create_compute(api, srv, name, cluster(location))
    try:
        assert nodes(api, srv, name) == []
        jobs = [f"ssh-job-{i}" for i in range(HOSTS)]
        for j in jobs:
            cmd = "echo ran on $(hostname -I); sleep 6"
            assert submit(api, srv, j, {"command": cmd, "compute": f"azureml:{name}"})["status"] == "Queued"
        addresses = {h.address for h in hosts}

        def all_busy() -> list[dict[str, Any]] | None:
            listed = nodes(api, srv, name)
            ips = {n["privateIpAddress"] for n in listed if n["nodeState"] in ("running", "idle")}
            return listed if ips == addresses else None

        listed = wait_until(all_busy, 180, "a node on each of the 4 hosts")
        assert len(listed) == HOSTS
        done = [wait_job(api, srv, j, timeout=120) for j in jobs]
        assert [d["status"] for d in done] == ["Completed"] * HOSTS, done
        ran_on = {log_text(api, srv, j).split("ran on ", 1)[1].split()[0] for j in jobs}
        assert ran_on == addresses  # each job on its own host
        wait_until(lambda: nodes(api, srv, name) == [], 120, "the cluster to scale back to zero")
        for h in hosts:  # no agent left on any host
            wait_until(
                lambda h=h: not netns_hosts.host_processes(h.user, "cloudlet.agent"), 30, f"{h.user}'s agents"
            )
    finally:
        delete_compute(api, srv, name)


# -- a host's agent dies: its job requeues elsewhere ------------------------------------------
def test_killing_a_hosts_agent_requeues_its_job_on_another_host(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost], location: str
) -> None:
    name = "ssh-requeue"
    create_compute(api, srv, name, {**cluster(location, max_instances=2), "min_instances": 2})
    try:
        wait_until(
            lambda: len([n for n in nodes(api, srv, name) if n["nodeState"] == "idle"]) == 2 or None,
            180,
            "two idle nodes",
        )
        j = "ssh-requeue-job"
        submit(
            api, srv, j, {"command": "echo attempt on $(hostname -I); sleep 30", "compute": f"azureml:{name}"}
        )
        wait_job(api, srv, j, ("Running",), timeout=60)
        [busy] = wait_until(
            lambda: [n for n in nodes(api, srv, name) if n["nodeState"] == "running"] or None,
            30,
            "the busy node",
        )
        victim = next(h for h in hosts if h.address == busy["privateIpAddress"])
        # The host's agent goes with everything it supervises (its watchdog would restart it).
        for pid in netns_hosts.host_processes(victim.user, ""):
            os.kill(pid, signal.SIGKILL)

        def requeued() -> dict[str, Any] | None:
            seen = job(api, srv, j)
            text = log_text(api, srv, j)
            others = {h.address for h in hosts} - {victim.address}
            moved = any(f"attempt on {a}" in text for a in others)
            return seen if moved else None

        wait_until(requeued, 120, "the job to run again on another host")
        done = wait_job(api, srv, j, TERMINAL, timeout=120)
        assert done["status"] == "Completed", done
    finally:
        delete_compute(api, srv, name)
        time.sleep(0)  # the killed host's agent is restarted by the next node made there


# -- a 2-node torch gloo job across two hosts --------------------------------------------------
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "pytorch-ddp" / "job.yml"


def test_a_two_node_gloo_job_spans_two_hosts(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost]
) -> None:
    import importlib.util

    from cloudlet.client import MLClient, load_job

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (scripts/setup-tests.sh installs torch==2.13.0)")
    # The hosts share this machine's file system: their Python sees this one's packages (torch).
    config = {**ssh_config(hosts), "python": netns_hosts.host_python(hosts[0].home.parent.parent)}
    made = api.put(f"{LOCATIONS}/lab-ssh-torch", json={"provider": "ssh", "config": config})
    assert made.status_code == 201, made.text
    name = "ssh-ddp"
    create_compute(api, srv, name, cluster("lab-ssh-torch", max_instances=2, idle=60))
    try:
        client = MLClient(home=srv.home)
        submitted = client.jobs.create_or_update(load_job(EXAMPLE, [{"compute": f"azureml:{name}"}]))
        final = wait_job(api, srv, submitted.name, TERMINAL, timeout=300)
        files = client.jobs.logs(submitted.name)["files"]
        logs = {f: client.jobs.logs(submitted.name, file=f)["data"] for f in files}
        assert final["status"] == "Completed", logs
        for rank, text in enumerate(logs[f] for f in sorted(logs)):
            assert f"rank {rank}/2" in text and "all_reduce sum = 3 (expected 3)" in text, text
        ran_on = {n for a in client.jobs.get(submitted.name)._to_dict()["attempts"] for n in a["nodes"]}
        used = {n["privateIpAddress"] for n in nodes(api, srv, name) if n["nodeId"] in ran_on}
        assert len(ran_on) == 2 and len(used) == 2 and used <= {h.address for h in hosts}, (ran_on, used)
    finally:
        delete_compute(api, srv, name)
