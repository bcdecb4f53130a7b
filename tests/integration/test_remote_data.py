"""Job data over HTTP for hosts that do not share the server's disk (docs/providers.md).

Real parts: a server on the bridge of this module's own network-namespace hosts (``brrd``,
10.77.6.0/24), an SSH location with its default ``shared_filesystem: false``, the hosts' agents
dialling in over TLS as unprivileged users. The hosts share this machine's disk, so the proof that
a job's data came over HTTP is that the server's data folder (0700, the server's user) is out of
the host user's reach, the paths the job sees are under its host's agent folder, and the agent's
notes in the job's log say so."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import stat
import tarfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import netns_hosts
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import (
    TERMINAL,
    _environ,
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

NET = netns_hosts.HostNet(bridge="brrd", prefix="clrd", subnet="10.77.6", user_prefix="clrdu")
HOSTS = 2
SIZE = "Standard_DS2_v2"
CLUSTER = "rd-cluster"
LOCATION = "rd-ssh"

pytestmark = pytest.mark.skipif(netns_hosts.missing() is not None, reason=str(netns_hosts.missing()))


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[netns_hosts.SshHost]]:
    with netns_hosts.temporary_hosts(HOSTS, "clrd-", NET) as made:
        yield made


@pytest.fixture(scope="module")
def srv(
    hosts: list[netns_hosts.SshHost], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "remote-data", host=NET.bridge_address)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


@pytest.fixture(scope="module")
def cluster(api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost]) -> Iterator[str]:
    config = {"hosts": [h.as_config() for h in hosts]}  # shared_filesystem: false, the default
    made = api.put(f"/api/v1/locations/{LOCATION}", json={"provider": "ssh", "config": config})
    assert made.status_code == 201, made.text
    assert made.json()["config"].get("shared_filesystem") in (False, None), made.json()
    body = {
        "type": "amlcompute",
        "size": SIZE,
        "location": LOCATION,
        "min_instances": HOSTS,
        "max_instances": HOSTS,
        "idle_time_before_scale_down": 600,
    }
    create_compute(api, srv, CLUSTER, body)
    try:
        wait_until(
            lambda: len([n for n in nodes(api, srv, CLUSTER) if n["nodeState"] == "idle"]) == HOSTS or None,
            180,
            "a node on each host",
        )
        yield CLUSTER
    finally:
        delete_compute(api, srv, CLUSTER)


def datastore(srv: RunningServer) -> Path:
    with sqlite3.connect(f"file:{srv.home / 'cloudlet.db'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT id FROM workspaces WHERE name = 'default'").fetchone()
    return srv.home / "data" / "workspaces" / str(row[0]) / "datastores" / "workspaceblobstore"


def tar_of(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def untar(data: bytes) -> dict[str, str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {
            m.name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def upload(api: httpx.Client, srv: RunningServer, path: str, files: dict[str, str]) -> None:
    url = f"{srv.ws_path}/datastores/workspaceblobstore/paths/{path}"
    put = api.put(url, content=tar_of(files), headers={"Content-Type": "application/gzip"})
    assert put.status_code == 201, put.text


def uri(path: str) -> str:
    return f"azureml://datastores/workspaceblobstore/paths/{path}"


def log_with(api: httpx.Client, srv: RunningServer, name: str, needle: str, timeout: float = 90) -> str:
    def found() -> str | None:
        text = log_text(api, srv, name)
        return text if needle in text else None

    return wait_until(found, timeout, f"{needle!r} in {name}'s log")


def agent_of(host: netns_hosts.SshHost) -> dict[str, str]:
    """The environment of the host's agent (its node id and token)."""
    for pid in netns_hosts.host_processes(host.user, "cloudlet.agent"):
        env = _environ(pid)
        if env.get("CLOUDLET_NODE_TOKEN"):
            return env
    raise AssertionError(f"no agent on {host.user}")


# -- inputs arrive, outputs come back ---------------------------------------------------------
def test_a_job_reads_its_inputs_and_its_outputs_come_back_over_http(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost], cluster: str
) -> None:
    upload(api, srv, "rd-in", {"a.txt": "alpha\n", "sub/b.txt": "beta\n"})
    upload(api, srv, "rd-one", {"one.txt": "just one file\n"})
    data_root = srv.home / "data"
    # The host users cannot reach the server's data: only HTTP can bring it to them.
    assert stat.S_IMODE(os.stat(data_root).st_mode) == 0o700
    assert {os.stat(data_root).st_uid} != {os.stat(h.home).st_uid for h in hosts}
    command = (
        "echo input at ${{inputs.folder}}; cat ${{inputs.folder}}/a.txt ${{inputs.folder}}/sub/b.txt "
        "${{inputs.one}}; "
        f"ls {data_root} >/dev/null 2>&1 && echo SERVER-DISK-SEEN || echo no server disk here; "
        "echo tampered > ${{inputs.folder}}/a.txt; "  # a read-only input's copy: never uploaded
        "mkdir -p ${{outputs.result}}/deep && echo made on $(hostname -I) > ${{outputs.result}}/deep/r.txt; "
        "echo an artifact > outputs/art.txt"
    )
    name = "rd-io"
    body = {
        "command": command,
        "compute": f"azureml:{cluster}",
        "inputs": {
            "folder": {"type": "uri_folder", "path": uri("rd-in")},
            "one": {"type": "uri_file", "path": uri("rd-one/one.txt")},
        },
        "outputs": {"result": {"type": "uri_folder"}},
    }
    submit(api, srv, name, body)
    done = wait_job(api, srv, name, TERMINAL, timeout=180)
    text = log_text(api, srv, name)
    assert done["status"] == "Completed", text
    assert "alpha\nbeta\njust one file\n" in text and "no server disk here" in text, text
    seen_at = text.split("input at ", 1)[1].split()[0]
    homes = [str(h.home) for h in hosts]
    assert any(seen_at.startswith(home) for home in homes) and str(srv.home) not in seen_at, seen_at
    assert "data over HTTP: 6 of the run's 6 mounts downloaded" in text, text
    assert "writable mounts uploaded" in text, text
    # The output, through the outputs route (what `job download` reads), and on the server's disk.
    got = api.get(f"{srv.ws_path}/jobs/{name}/outputs/result")
    assert got.status_code == 200
    made = untar(got.content)
    assert made["deep/r.txt"].startswith("made on 10.77.6."), made
    assert (datastore(srv) / "azureml" / name / "result" / "deep" / "r.txt").read_text() == made["deep/r.txt"]
    artifacts = untar(api.get(f"{srv.ws_path}/jobs/{name}/artifacts").content)
    assert any(k.endswith("outputs/art.txt") and v == "an artifact\n" for k, v in artifacts.items()), (
        artifacts
    )
    assert (datastore(srv) / "rd-in" / "a.txt").read_text() == "alpha\n"  # the input stays as it was


# -- authorization: the run's own node only ----------------------------------------------------
def test_a_runs_data_is_its_own_nodes_alone(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost], cluster: str
) -> None:
    upload(api, srv, "rd-authz", {"x.txt": "x\n"})
    name = "rd-authz-job"
    body = {
        "command": "echo run $CLOUDLET_RUN_ID on $(hostname -I); sleep 120",
        "compute": f"azureml:{cluster}",
        "inputs": {"data": {"type": "uri_folder", "path": uri("rd-authz")}},
    }
    submit(api, srv, name, body)
    try:
        text = log_with(api, srv, name, "run r-")
        run_id, address = text.split("run ", 1)[1].split()[0], text.split(" on ", 1)[1].split()[0]
        mine = agent_of(next(h for h in hosts if h.address == address))
        theirs = agent_of(next(h for h in hosts if h.address != address))
        assert mine["CLOUDLET_NODE_ID"] != theirs["CLOUDLET_NODE_ID"]
        reader = new_user(api, srv, "rd-reader", "Reader")
        url = f"{srv.endpoint}/agent/v1/runs/{run_id}/data"

        def get(token: str, path: str) -> httpx.Response:
            return httpx.get(url, params={"path": path}, headers={"Authorization": f"Bearer {token}"})

        def put(token: str, path: str, files: dict[str, str]) -> httpx.Response:
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/gzip"}
            return httpx.put(url, params={"path": path}, content=tar_of(files), headers=headers)

        own = get(mine["CLOUDLET_NODE_TOKEN"], "0")
        assert own.status_code == 200 and own.headers["x-cloudlet-data"] == "folder"
        assert untar(own.content) == {"x.txt": "x\n"}
        assert get(theirs["CLOUDLET_NODE_TOKEN"], "0").status_code == 401  # another node's token
        assert put(theirs["CLOUDLET_NODE_TOKEN"], "1", {"y": "y"}).status_code == 401
        assert get(reader, "0").status_code == 401  # a user's key is no node token
        assert get(srv.api_key, "0").status_code == 401  # not even an administrator's
        assert httpx.get(url, params={"path": "0"}).status_code == 401
        token = mine["CLOUDLET_NODE_TOKEN"]
        refused = put(token, "0", {"x.txt": "overwritten"})  # its read-only input
        assert refused.status_code == 409 and refused.json()["error"]["target"] == "path", refused.text
        for bad in ("0/../../../../etc", "/etc/passwd", "rd-authz/x.txt"):
            answer = get(token, bad)
            assert answer.status_code == 400 and answer.json()["error"]["target"] == "path", (
                bad,
                answer.text,
            )
        assert get(token, "42").status_code == 404
        quoted = urllib.parse.quote("0/x.txt")
        assert httpx.get(f"{url}?path={quoted}", headers={"Authorization": f"Bearer {token}"}).text == "x\n"
        assert (datastore(srv) / "rd-authz" / "x.txt").read_text() == "x\n"
    finally:
        api.post(f"{srv.ws_path}/jobs/{name}/cancel")
        wait_job(api, srv, name, TERMINAL, timeout=60)


# -- checkpoints: uploaded while the job runs, a requeued attempt resumes from them -------------
def test_a_requeued_job_resumes_from_the_checkpoint_its_first_host_uploaded(
    api: httpx.Client, srv: RunningServer, hosts: list[netns_hosts.SshHost], cluster: str
) -> None:
    name = "rd-resume"
    command = (
        'C=$CLOUDLET_CHECKPOINT_DIR; if [ -f "$C/state" ]; then echo "resumed from $(cat "$C/state")"; '
        'else echo "step-7 of $(hostname -I)" > "$C/state"; echo fresh on $(hostname -I); sleep 300; fi'
    )
    body = {
        "command": command,
        "compute": f"azureml:{cluster}",
        "environment_variables": {"CLOUDLET_CHECKPOINT_UPLOAD_S": "0.5"},
    }
    submit(api, srv, name, body)
    text = log_with(api, srv, name, "fresh on ")
    first = text.split("fresh on ", 1)[1].split()[0]
    saved = datastore(srv) / "checkpoints" / name / "state"
    wait_until(lambda: saved.exists() or None, 30, "the checkpoint uploaded while the job runs")
    assert saved.read_text().split() == ["step-7", "of", first]
    assert job(api, srv, name)["status"] == "Running"
    victim = next(h for h in hosts if h.address == first)
    for pid in netns_hosts.host_processes(victim.user, ""):  # the host goes, with its agent
        os.kill(pid, signal.SIGKILL)
    done = wait_job(api, srv, name, TERMINAL, timeout=240)
    text = log_text(api, srv, name)
    assert done["status"] == "Completed", (done, text)
    assert f"resumed from step-7 of {first}" in text, text
    assert len(done["attempts"]) >= 2, done


def test_a_location_says_whether_its_hosts_share_the_servers_disk(
    api: httpx.Client, hosts: list[netns_hosts.SshHost]
) -> None:
    config: dict[str, Any] = {"hosts": [hosts[0].as_config()], "shared_filesystem": "sometimes"}
    bad = api.put("/api/v1/locations/rd-bad", json={"provider": "ssh", "config": config})
    assert bad.status_code == 400 and bad.json()["error"]["target"] == "config.shared_filesystem", bad.text
    config["shared_filesystem"] = True
    good = api.put("/api/v1/locations/rd-shared", json={"provider": "ssh", "config": config})
    assert good.status_code == 201 and good.json()["config"]["shared_filesystem"] is True, good.text
