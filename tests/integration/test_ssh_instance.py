"""A compute instance on an SSH host (issue 15's acceptance): its node's agent runs on a real sshd
host in a network namespace (tests/netns_hosts.py) as that host's login, JupyterLab listens on the
host's address and opens through the control plane's proxy (HTTP and a kernel's WebSocket), the OS
disk is a folder of the host's agent dir, kept by stop/start on the same host, and delete leaves
nothing running there. Then SSH host keys: learned on first use, a changed key refused (its sshd
given a new key), accepted again with `cloudlet location update --accept-host-key`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudlet.domain.compute.host_keys import fingerprint
from tests import netns_hosts
from tests.conftest import RunningServer
from tests.instance_helpers import Kernel, app_url
from tests.jobs_helpers import create_compute, delete_compute, nodes, served, wait_until

NET = netns_hosts.HostNet(bridge="brsi", prefix="clsi", subnet="10.77.5", user_prefix="clsiu")
LOCATION = "si-lab"
WORKSPACE = "si-ws"
NAME = "si-ci"
OP_TIMEOUT_S = 150

pytestmark = pytest.mark.skipif(netns_hosts.missing() is not None, reason=str(netns_hosts.missing()))


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[netns_hosts.SshHost]]:
    with netns_hosts.temporary_hosts(2, "clsi-", NET) as made:
        yield made


@pytest.fixture(scope="module")
def srv(
    hosts: list[netns_hosts.SshHost], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "ssh-instance", host=NET.bridge_address)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


@pytest.fixture(scope="module")
def workspace(api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost]) -> str:
    """A workspace in the SSH location (an instance lives in its workspace's location, C4)."""
    python = netns_hosts.host_python(hosts[0].home.parent.parent)  # sees JupyterLab
    config = {"hosts": [h.as_config() for h in hosts], "python": python, "overcommit": 4}
    made = api.put(f"/api/v1/locations/{LOCATION}", json={"provider": "ssh", "config": config})
    assert made.status_code == 201, made.text
    created = api.put(srv.workspace_path(WORKSPACE), json={"location": LOCATION})
    assert created.status_code in (200, 201), created.text
    return srv.workspace_path(WORKSPACE)


def operate(api: httpx.Client, srv: RunningServer, response: httpx.Response) -> None:
    assert response.status_code in (200, 201, 202), response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"], timeout=OP_TIMEOUT_S)
    assert op["status"] == "Succeeded", op


def live_node(api: httpx.Client, workspace: str) -> dict[str, Any]:
    listed = api.get(f"{workspace}/computes/{NAME}/nodes").json()["nodes"]
    [node] = [n for n in listed if n["state"] not in ("terminated", "failed", "lost")]
    return dict(node)


def ssh(settings: dict[str, Any], key: Path, *command: str) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-p", str(settings["ssh_port"]), "-i", str(key), "-o", "IdentitiesOnly=yes"]
    argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes"]
    argv += ["-o", "GSSAPIAuthentication=no"]
    argv += [f"{settings['admin_username']}@{settings['host']}", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def test_an_instance_on_an_ssh_host_opens_jupyterlab_through_the_proxy(
    api: httpx.Client,
    srv: RunningServer,
    hosts: list[netns_hosts.SshHost],
    workspace: str,
    tmp_path: Path,
) -> None:
    host = hosts[0]
    python = api.get(f"/api/v1/locations/{LOCATION}").json()["config"]["python"]
    url = f"{workspace}/computes/{NAME}"
    key = tmp_path / "owner"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    ssh_on = {
        "ssh_public_access_enabled": True,
        "ssh_settings": {"ssh_key_value": key.with_suffix(".pub").read_text()},
    }
    body = {"type": "computeinstance", "size": "Standard_DS2_v2", "location": LOCATION, **ssh_on}
    operate(api, srv, api.put(url, json=body))
    try:
        shown = api.get(url).json()
        assert shown["state"] == "Running" and shown["location"] == LOCATION, shown
        # compute show names the host: the node's address and the instance's sshd on it.
        assert shown["network_settings"]["private_ip_address"] == host.address, shown
        settings = shown["ssh_settings"]
        assert settings["ssh_state"] == "ready" and settings["host"] == host.address, settings
        assert settings["connect_command"].endswith(f"@{host.address}")
        logged_in = ssh(settings, key, "echo", "$HOME")
        assert logged_in.returncode == 0, logged_in.stderr
        node = live_node(api, workspace)
        assert node["privateIpAddress"] == host.address, node
        # The agent and Jupyter run on the host as its login (not as the server's user).
        assert netns_hosts.host_processes(host.user, "cloudlet.agent")
        assert netns_hosts.host_processes(host.user, "jupyterlab")
        reported = node.get("apps", {}).get("jupyterlab") or {}
        if reported:
            assert reported.get("address") == host.address, reported

        auth = {"Authorization": f"Bearer {srv.api_key}"}
        status = httpx.get(app_url(srv, NAME, "api/status"), headers=auth, timeout=30)
        assert status.status_code == 200 and "kernels" in status.json(), status.text
        assert httpx.get(app_url(srv, NAME, "api/status"), timeout=30).status_code == 401

        # A kernel on the host, spoken to over its WebSocket through the proxy; a file on the OS disk.
        with Kernel(srv, NAME) as kernel:
            out = kernel.run(
                "import os, pathlib, socket\n"
                "pathlib.Path.home().joinpath('kept.txt').write_text('on the os disk')\n"
                "print(os.getuid(), pathlib.Path.home())\n"
            )
        uid, home = out.split()
        assert logged_in.stdout.strip() == home  # sshd on the host lands in the same home
        assert int(uid) == host.home.stat().st_uid  # the host's login
        assert home.startswith(str(host.home)) and "/instances/" in home, home  # in its agent dir
        assert (Path(home) / "kept.txt").read_text() == "on the os disk"
        assert not list((srv.home / "data").glob("workspaces/*/instances/*/os"))  # nothing server-side

        operate(api, srv, api.post(f"{url}/stop"))
        assert api.get(url).json()["state"] == "Stopped"
        wait_until(
            lambda: not netns_hosts.host_processes(host.user, "cloudlet.agent"), 30, "the agent to stop"
        )
        assert (Path(home) / "kept.txt").exists()
        # With the hosts listed the other way round, an empty hosts[1] would now come first: the
        # start still lands on hosts[0], where the OS disk is.
        flipped = {"hosts": [h.as_config() for h in reversed(hosts)], "python": python, "overcommit": 4}
        assert api.put(f"/api/v1/locations/{LOCATION}", json={"config": flipped}).status_code == 200
        operate(api, srv, api.post(f"{url}/start"))
        again = live_node(api, workspace)
        assert again["nodeId"] != node["nodeId"] and again["privateIpAddress"] == host.address
        with Kernel(srv, NAME) as kernel:
            kept = kernel.run("import pathlib; print(pathlib.Path.home().joinpath('kept.txt').read_text())")
        assert kept.strip() == "on the os disk"
    finally:
        response = api.delete(url)
        if response.status_code == 202:
            srv.wait_operation(api, response.headers["Operation-Location"], timeout=OP_TIMEOUT_S)
    assert api.get(url).status_code == 404
    for needle in ("cloudlet", "jupyter", "ipykernel"):  # (its sshd session is the provider's link)
        wait_until(lambda n=needle: not netns_hosts.host_processes(host.user, n), 30, f"no {needle} left")
    assert not list(host.home.glob("**/instances/*/os")), "the OS disk is removed with the instance"


# -- SSH host keys ---------------------------------------------------------------------------------
KEYS_LOCATION = "si-keys"


def host_key_of(host: netns_hosts.SshHost) -> str:
    return fingerprint((host.home.parent / "host_key.pub").read_text())


def new_host_key(host: netns_hosts.SshHost) -> None:
    """The host is reinstalled: its sshd (and every session) stops, gets a new key, starts again."""
    for pid in subprocess.run(
        ["ip", "netns", "pids", host.namespace], capture_output=True, text=True
    ).stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    folder = host.home.parent
    for name in ("host_key", "host_key.pub"):
        (folder / name).unlink()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "host_key")], check=True
    )
    with open(folder / "sshd.log", "ab") as out:
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                host.namespace,
                netns_hosts.SSHD,
                "-D",
                "-e",
                "-f",
                str(folder / "sshd_config"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    netns_hosts._wait_port(host.address, host.port, proc, folder / "sshd.log")  # torn down with the netns


def cluster_body(location: str) -> dict[str, Any]:
    return {"type": "amlcompute", "size": "Standard_DS1_v2", "location": location, "max_instances": 1}


def shown_keys(api: httpx.Client) -> list[dict[str, Any]]:
    response = api.get(f"/api/v1/locations/{KEYS_LOCATION}")
    assert response.status_code == 200, response.text
    keys: list[dict[str, Any]] = response.json()["host_keys"]
    return keys


def test_host_keys_are_learned_then_a_changed_key_is_refused_until_accepted(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost]
) -> None:
    host = hosts[1]
    bad = {"hosts": [{**host.as_config(), "host_key": "not a key"}]}
    refused = api.put(f"/api/v1/locations/{KEYS_LOCATION}", json={"provider": "ssh", "config": bad})
    assert refused.status_code == 400 and refused.json()["error"]["target"] == "config.hosts.0.host_key"
    made = api.put(
        f"/api/v1/locations/{KEYS_LOCATION}",
        json={"provider": "ssh", "config": {"hosts": [host.as_config()]}},
    )
    assert made.status_code == 201, made.text
    # The sweep's first listing connects: the key it presented is recorded (trust on first use).
    [learned] = wait_until(lambda: shown_keys(api) or None, 30, "the host key to be learned")
    first = host_key_of(host)
    assert learned["address"] == host.address and learned["port"] == host.port, learned
    assert learned["state"] == "trusted" and learned["key"] == f"ssh-ed25519 {first}", learned

    new_host_key(host)
    second = host_key_of(host)
    assert second != first
    [changed] = wait_until(
        lambda: [k for k in shown_keys(api) if k["state"] == "changed"] or None, 60, "the changed key refused"
    )
    assert changed["key"] == f"ssh-ed25519 {first}" and changed["refused_key"] == f"ssh-ed25519 {second}"
    fix = f"cloudlet location update -n {KEYS_LOCATION} --accept-host-key {host.address}:{host.port}"
    assert changed["fix"] == fix, changed
    # Nothing runs there with the changed key: a node asked for says why, naming host and fix.
    name = "si-keys-c"
    body = {**cluster_body(KEYS_LOCATION), "min_instances": 1}
    create_compute(api, srv, name, body)
    try:

        def refusal() -> str | None:
            text = repr(api.get(f"{srv.ws_path}/computes/{name}").json()) + repr(nodes(api, srv, name))
            return text if "host key" in text else None

        text = wait_until(refusal, 60, "the node's status to say the host key changed")
        assert host.address in text and "--accept-host-key" in text and second in text, text
        assert not netns_hosts.host_processes(host.user, "cloudlet.agent")

        refused = api.put(f"/api/v1/locations/{KEYS_LOCATION}", json={"accept_host_keys": ["10.0.0.250"]})
        assert refused.status_code == 400 and refused.json()["error"]["target"] == "accept_host_keys"
        accepted = subprocess.run(
            [
                sys.executable,
                "-m",
                "cloudlet",
                "location",
                "update",
                "-n",
                KEYS_LOCATION,
                "--accept-host-key",
                f"{host.address}:{host.port}",
            ],
            env=srv.cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert accepted.returncode == 0, accepted.stderr
        [now] = shown_keys(api)
        assert now["state"] == "trusted" and now["key"] == f"ssh-ed25519 {second}", now
        # Let in again: the cluster's node starts on the host.
        wait_until(
            lambda: [n for n in nodes(api, srv, name) if n["nodeState"] == "idle"] or None,
            120,
            "the node to start",
        )
    finally:
        delete_compute(api, srv, name)
    wait_until(lambda: not netns_hosts.host_processes(host.user, "cloudlet.agent"), 30, "the agent to stop")


def test_a_pinned_host_key_is_the_only_one_let_in(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost]
) -> None:
    host, other = hosts[1], hosts[0]
    wrong = (other.home.parent / "host_key.pub").read_text()  # another host's key
    config = {"hosts": [{**host.as_config(), "host_key": wrong}]}
    made = api.put("/api/v1/locations/si-pinned", json={"provider": "ssh", "config": config})
    assert made.status_code == 201, made.text
    name = "si-pinned-c"
    body = {**cluster_body("si-pinned"), "min_instances": 1}
    create_compute(api, srv, name, body)
    try:

        def refusal() -> str | None:
            text = repr(api.get(f"{srv.ws_path}/computes/{name}").json()) + repr(nodes(api, srv, name))
            return text if "host_key pinned in the configuration" in text else None

        text = wait_until(refusal, 60, "the node's status to say the key is not the pinned one")
        assert host.address in text and host_key_of(host) in text and host_key_of(other) in text, text
        assert api.get("/api/v1/locations/si-pinned").json()["host_keys"] == []  # nothing learned
        right = {"hosts": [{**host.as_config(), "host_key": (host.home.parent / "host_key.pub").read_text()}]}
        assert api.put("/api/v1/locations/si-pinned", json={"config": right}).status_code == 200
        wait_until(
            lambda: [n for n in nodes(api, srv, name) if n["nodeState"] == "idle"] or None,
            120,
            "the node to start with the right pinned key",
        )
    finally:
        delete_compute(api, srv, name)
    wait_until(lambda: not netns_hosts.host_processes(host.user, "cloudlet.agent"), 30, "the agent to stop")


def test_a_known_hosts_file_is_checked_and_nothing_is_learned(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost], tmp_path: Path
) -> None:
    host, other = hosts[1], hosts[0]
    known = tmp_path / "known_hosts"
    wrong = (other.home.parent / "host_key.pub").read_text().split()
    known.write_text(f"{host.address} {wrong[0]} {wrong[1]}\n")  # another host's key for this address
    config = {"hosts": [host.as_config()], "known_hosts": str(known)}
    made = api.put("/api/v1/locations/si-known", json={"provider": "ssh", "config": config})
    assert made.status_code == 201, made.text
    name = "si-known-c"
    create_compute(api, srv, name, {**cluster_body("si-known"), "min_instances": 1})
    try:

        def refusal() -> str | None:
            text = repr(api.get(f"{srv.ws_path}/computes/{name}").json()) + repr(nodes(api, srv, name))
            return text if "does not list for it" in text else None

        text = wait_until(refusal, 60, "the node's status to say known_hosts lacks the key")
        assert host.address in text and str(known) in text and host_key_of(host) in text, text
        assert api.get("/api/v1/locations/si-known").json()["host_keys"] == []  # nothing learned
        right = (host.home.parent / "host_key.pub").read_text().split()
        known.write_text(f"{host.address} {right[0]} {right[1]}\n")
        wait_until(
            lambda: [n for n in nodes(api, srv, name) if n["nodeState"] == "idle"] or None,
            120,
            "the node to start once known_hosts has the host's key",
        )
    finally:
        delete_compute(api, srv, name)
    wait_until(lambda: not netns_hosts.host_processes(host.user, "cloudlet.agent"), 30, "the agent to stop")
