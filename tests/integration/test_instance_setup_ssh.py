"""Acceptance: setup scripts and SSH on compute instances (issue 4, items 7 and 8), and the instance
report the agent sends beside its apps (``Node.report``: activity, setup, ssh, disk).

One server for the module, with bare instance nodes (``CLOUDLET_INSTANCE_APPS=``: no Jupyter, the
scripts, sshd and report do not need it) and a fast report (0.5 s). Real agents, real bash
scripts, a real OpenSSH sshd and ssh client: nothing is mocked.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudlet.agent.sshd import sshd_binary
from cloudlet.domain.compute.idleness import report_from_wire
from tests.conftest import RunningServer, start_server
from tests.instance_helpers import INSTANCE, OP_TIMEOUT_S, act, compute_url, create_instance, delete_instance
from tests.jobs_helpers import reaped, wait_until
from tests.studio_http import sign_in, studio_client

NO_SSHD = (
    "OpenSSH server (/usr/sbin/sshd) is not installed: "
    "run scripts/setup-tests.sh (apt-get install openssh-server)"
)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {"CLOUDLET_INSTANCE_APPS": "", "CLOUDLET_INSTANCE_REPORT_S": "0.5"}
    server = start_server(Path(tmp_path_factory.mktemp("setup-ssh")), extra_env=env)
    with reaped(server):
        yield server
        _delete_instances(server)  # a failed test's instance: release its OS disk (a loop mount)


def _delete_instances(srv: RunningServer) -> None:
    with srv.client() as api:
        for item in api.get(f"{srv.ws_path}/computes").json().get("value", []):
            response = api.delete(compute_url(srv, item["name"]))
            if response.status_code == 202:
                srv.wait_operation(api, response.headers["Operation-Location"], timeout=60)


def os_disk(srv: RunningServer, name: str) -> Path:
    [disk] = (srv.home / "data" / "workspaces").glob(f"*/instances/{name}/os")
    return disk


def node_report(srv: RunningServer, name: str) -> dict[str, Any]:
    """The latest node's ``Node.report``, read from the store (what the control plane reads)."""
    with sqlite3.connect(f"file:{srv.home / 'cloudlet.db'}?mode=ro", uri=True) as db:
        row = db.execute(
            "SELECT n.report FROM nodes n JOIN computes c ON n.owner_type = 'computes' AND c.id = n.owner_id "
            "WHERE c.name = ? ORDER BY n.created_at DESC LIMIT 1",
            (name,),
        ).fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def cli(
    srv: RunningServer, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# -- setup scripts ------------------------------------------------------------------------------
def test_creation_once_startup_every_start_with_logs(api: httpx.Client, srv: RunningServer) -> None:
    # A script's path is relative to the owner's folder of the workspace share (Users/<owner>/).
    folder = srv.home / "data" / "workspaces" / "1" / "share" / "Users" / "admin"  # the default workspace
    (folder / "scripts").mkdir(parents=True, exist_ok=True)
    (folder / "scripts" / "startup.sh").write_text(
        'echo "starting in $PWD"; echo started >> "$HOME/starts"\n'
    )
    scripts = {
        "creation_script": {"command": 'echo "creating as $(whoami)"; echo made >> "$HOME/creations"'},
        "startup_script": {"path": "scripts/startup.sh", "timeout_minutes": 1},
    }
    shown = create_instance(api, srv, "cis1", setup_scripts=scripts)
    disk = os_disk(srv, "cis1")
    assert disk.is_relative_to(folder.parents[2])
    assert shown["state"] == "Running"
    assert (lines(disk / "creations"), lines(disk / "starts")) == (["made"], ["started"])

    report = node_report(srv, "cis1")
    assert set(report) >= {"activity", "setup", "ssh", "disk"}, report
    assert report["setup"]["creation_script"]["state"] == "ok"
    assert report["setup"]["startup_script"]["exit_code"] == 0
    assert f"starting in {folder}" in report["setup"]["startup_script"]["tail"]
    assert report["ssh"]["state"] == "disabled"
    assert isinstance(report["disk"]["full"], bool) and report["disk"]["total_bytes"] > 0
    assert report_from_wire(report["activity"]).ssh_sessions == 0  # the idle side reads it as is

    act(api, srv, "cis1", "stop")
    act(api, srv, "cis1", "start")
    assert (lines(disk / "creations"), lines(disk / "starts")) == (["made"], ["started", "started"])
    logs = api.get(compute_url(srv, "cis1") + "/setup-logs").json()["scripts"]
    assert logs["creation"]["state"] == "skipped"
    assert logs["creation"]["log_text"].count("creating as root") == 1
    assert logs["startup"]["state"] == "ok"
    assert logs["startup"]["log_text"].count("starting in") == 2
    assert logs["startup"]["log"].endswith("/os/logs/startup_script.log")

    shown_log = cli(srv, "-o", "table", "compute", "show-setup-log", "-n", "cis1", "--script", "startup")
    assert shown_log.returncode == 0, shown_log.stderr
    assert "startup script: ok" in shown_log.stdout and shown_log.stdout.count("starting in") == 2
    assert "creating as" not in shown_log.stdout
    delete_instance(api, srv, "cis1")


def test_failing_startup_script_fails_the_instance_with_its_log(
    api: httpx.Client, srv: RunningServer
) -> None:
    body = {
        **INSTANCE,
        "setup_scripts": {"startup_script": {"command": "echo broken-$((3 + 4)) >&2; exit 7"}},
    }
    response = api.put(compute_url(srv, "cis2"), json=body)
    assert response.status_code in (200, 201), response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"], timeout=OP_TIMEOUT_S)
    assert op["status"] == "Failed", op
    error = op["error"]
    assert error["code"] == "SetupScriptFailed", error
    assert "startup script" in error["message"] and "exit code 7" in error["message"]
    assert "broken-7" in error["message"]
    shown = api.get(compute_url(srv, "cis2")).json()
    assert shown["state"] == "Failed"
    logs = api.get(compute_url(srv, "cis2") + "/setup-logs").json()["scripts"]
    assert logs["startup"]["state"] == "failed" and logs["startup"]["exit_code"] == 7
    assert "broken-7" in logs["startup"]["log_text"]
    delete_instance(api, srv, "cis2")


# -- SSH ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if sshd_binary() is None or shutil.which("ssh") is None:
        pytest.skip(NO_SSHD)
    folder = tmp_path_factory.mktemp("keys")
    out = {}
    for name in ("owner", "other"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(folder / name)],
            check=True,
            capture_output=True,
        )
        out[name] = folder / name
    return out


def ssh(settings: dict[str, Any], key: Path, *command: str) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-p", str(settings["ssh_port"]), "-i", str(key), "-o", "IdentitiesOnly=yes"]
    argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes"]
    argv += ["-o", "GSSAPIAuthentication=no"]  # no Kerberos realm lookup over DNS
    argv += [f"{settings['admin_username']}@{settings['host']}", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def test_ssh_accepts_only_the_owners_key(
    api: httpx.Client, srv: RunningServer, keys: dict[str, Path], tmp_path: Path
) -> None:
    public = (keys["owner"].with_suffix(".pub")).read_text().strip()
    ssh_on = {"ssh_public_access_enabled": True, "ssh_settings": {"ssh_key_value": public}}
    shown = create_instance(api, srv, "cis3", **ssh_on)
    settings = shown["ssh_settings"]
    assert settings["ssh_state"] == "ready" and settings["host"] == "127.0.0.1"
    # sshd runs in the instance's sandbox as its unprivileged user, the only one it can log in.
    assert settings["admin_username"] == "azureuser" and settings["ssh_port"] > 0
    assert settings["connect_command"] == f"ssh -p {settings['ssh_port']} azureuser@127.0.0.1"
    with studio_client(srv) as studio:  # the studio's instance page shows the same command
        assert sign_in(studio, srv.api_key).status_code == 303
        page = studio.get(f"/studio/ws/{srv.subscription_id}/default/default/compute/cis3")
        assert f"<code>{settings['connect_command']}</code>" in page.text, page.text

    secret = srv.home / "credentials"
    ok = ssh(settings, keys["owner"], "echo", "ok", "$HOME", "$(id -u)", f"$(cat {secret} 2>/dev/null)")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["ok", str(os_disk(srv, "cis3")), "65534"]
    refused = ssh(settings, keys["other"], "echo", "ok")
    assert refused.returncode == 255 and "Permission denied" in refused.stderr

    dry = cli(
        srv, "compute", "connect-ssh", "-n", "cis3", "--private-key-file", str(keys["owner"]), "--dry-run"
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith(f"ssh -p {settings['ssh_port']} -i {keys['owner']} ")
    assert dry.stdout.strip().endswith("azureuser@127.0.0.1")
    known = f"UserKnownHostsFile={tmp_path / 'known_hosts'}"  # not the runner's ~/.ssh
    run = cli(
        srv,
        "compute",
        "connect-ssh",
        "-n",
        "cis3",
        "--private-key-file",
        str(keys["owner"]),
        "--ssh-option",
        known,
        "--ssh-option",
        "GSSAPIAuthentication=no",
        "--",
        "echo",
        "via-cli",
    )
    assert run.returncode == 0 and run.stdout.strip() == "via-cli", run.stderr
    host_key = (os_disk(srv, "cis3") / ".cloudlet" / "ssh" / "ssh_host_ed25519_key.pub").read_text()
    assert host_key.split()[1] in (tmp_path / "known_hosts").read_text()  # kept on the OS disk
    report = node_report(srv, "cis3")
    assert report["ssh"]["state"] == "ready" and report["ssh"]["port"] == settings["ssh_port"]

    act(api, srv, "cis3", "stop")  # sshd goes with the node
    wait_until(lambda: ssh(settings, keys["owner"], "true").returncode == 255, 10, "sshd to stop")
    assert api.get(compute_url(srv, "cis3")).json()["ssh_settings"]["ssh_state"] == "stopped"
    delete_instance(api, srv, "cis3")


def test_invalid_ssh_key_is_refused(api: httpx.Client, srv: RunningServer) -> None:
    body = {**INSTANCE, "ssh_public_access_enabled": True, "ssh_settings": {"ssh_key_value": "not a key"}}
    response = api.put(compute_url(srv, "cis4"), json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["target"] == "ssh_settings.ssh_key_value"
    assert api.get(compute_url(srv, "cis4")).status_code == 404


def test_workspace_policy_forbids_ssh(api: httpx.Client, srv: RunningServer) -> None:
    path = srv.workspace_path("nossh")
    made = api.put(path, json={"location": "local", "allow_ssh_public_access": False})
    assert made.status_code in (200, 201), made.text
    assert made.json()["allow_ssh_public_access"] is False
    assert api.get(srv.ws_path).json()["allow_ssh_public_access"] is True
    bad = api.put(path, json={"allow_ssh_public_access": "no"})
    assert bad.status_code == 400 and "true or false" in bad.text

    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHdRz9c3a0jnlJqZp0m2wq8o8s0sXk0B0h1F7Yb0zZ5G me@host"
    body = {**INSTANCE, "ssh_public_access_enabled": True, "ssh_settings": {"ssh_key_value": key}}
    refused = api.put(f"{path}/computes/cis5", json=body)
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "RequestDisallowedByPolicy" and error["target"] == "ssh_public_access_enabled"
    assert "ssh_public_access_enabled: false" in error["message"]
    assert api.get(f"{path}/computes/cis5").status_code == 404  # nothing created
    assert api.get(f"{path}/operations").json()["value"] == []
