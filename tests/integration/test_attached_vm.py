"""Attached VMs (issue 15 item 2): a network namespace with its own sshd is the VM.

Attach (``type: virtualmachine`` with ``address`` and ``ssh_settings``) logs in, probes the VM and
installs the agent; a command job and a pipeline step run there, side by side up to its cores;
``compute show`` says its state and facts; detach stops the agent and removes its folder, leaving
the login's home as it was. Bad input and an unreachable VM are refused with nothing attached.
The server listens on the bridge's address so the VM's agent dials it across the (virtual) network.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cloudlet.domain.compute import host_keys
from tests import netns_hosts
from tests.conftest import RunningServer
from tests.jobs_helpers import compute, job, log_text, served, submit, wait_job, wait_until

NET = netns_hosts.HostNet(bridge="brvm", prefix="clvm", subnet="10.77.3", user_prefix="clvmu")
VM = "lab-vm"

pytestmark = pytest.mark.skipif(netns_hosts.missing() is not None, reason=str(netns_hosts.missing()))


@pytest.fixture(scope="module")
def vm() -> Iterator[netns_hosts.SshHost]:
    with netns_hosts.temporary_hosts(1, "clvm-", NET) as made:
        yield made[0]


@pytest.fixture(scope="module")
def srv(vm: netns_hosts.SshHost, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "attached-vm", host=NET.bridge_address)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def vm_doc(vm: netns_hosts.SshHost, name: str = VM, **changes: Any) -> dict[str, Any]:
    """Azure ML's attach YAML (CLI v2 ``virtualmachine``), with cloudlet's ``address``."""
    doc: dict[str, Any] = {
        "name": name,
        "type": "virtualmachine",
        "address": vm.address,
        "ssh_settings": {
            "admin_username": vm.user,
            "ssh_port": vm.port,
            "ssh_private_key_file": str(vm.identity_file),
        },
    }
    doc.update(changes)
    return doc


def attach(api: httpx.Client, srv: RunningServer, doc: dict[str, Any]) -> httpx.Response:
    return api.put(f"{srv.ws_path}/computes/{doc['name']}", json=doc)


def refused(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def home_listing(vm: netns_hosts.SshHost) -> list[str]:
    return sorted(str(p.relative_to(vm.home)) for p in vm.home.rglob("*"))


def test_bad_or_unreachable_attach_is_refused_and_nothing_is_attached(
    api: httpx.Client, srv: RunningServer, vm: netns_hosts.SshHost
) -> None:
    before = home_listing(vm)
    no_user = vm_doc(vm, "vm-bad", ssh_settings={"ssh_private_key_file": str(vm.identity_file)})
    assert refused(attach(api, srv, no_user))["target"] == "ssh_settings.admin_username"
    relative = vm_doc(vm, "vm-bad", ssh_settings={"admin_username": vm.user, "ssh_private_key_file": "id"})
    error = refused(attach(api, srv, relative))
    assert error["target"] == "ssh_settings.ssh_private_key_file" and "absolute" in error["message"]
    password = vm_doc(vm, "vm-bad", ssh_settings={"admin_username": vm.user, "admin_password": "x"})
    assert refused(attach(api, srv, password))["target"] == "ssh_settings.admin_password"
    typo = vm_doc(vm, "vm-bad", adress=vm.address)
    assert refused(attach(api, srv, typo))["target"] == "adress"
    nowhere = vm_doc(vm, "vm-nowhere", address=f"{NET.subnet}.250")
    error = refused(attach(api, srv, nowhere))
    assert error["code"] == "VirtualMachineUnreachable" and error["target"] == "address", error
    assert f"{NET.subnet}.250" in error["message"] and "nothing was attached" in error["message"]
    wrong_key = vm_doc(vm, "vm-wrong-key")
    wrong_key["ssh_settings"]["ssh_private_key_file"] = str(vm.identity_file.parent / "host_key")
    error = refused(attach(api, srv, wrong_key))
    assert error["code"] == "VirtualMachineUnreachable" and "refused" in error["message"], error
    record = {
        "name": "vm-record",
        "type": "virtualmachine",
        "resource_id": "/subscriptions/s/virtualMachines/v",
    }
    made = attach(api, srv, record)  # an Azure record only: stored, but no jobs
    assert made.status_code == 201, made.text
    srv.wait_operation(api, made.headers["Operation-Location"])
    sent = api.put(
        f"{srv.ws_path}/jobs/vm-record-job", json={"command": "true", "compute": "azureml:vm-record"}
    )
    error = refused(sent)
    assert error["target"] == "compute" and "'address'" in error["message"], error
    assert api.delete(f"{srv.ws_path}/computes/vm-record").status_code == 202
    for name in ("vm-bad", "vm-nowhere", "vm-wrong-key"):
        assert api.get(f"{srv.ws_path}/computes/{name}").status_code == 404
    assert home_listing(vm) == before  # nothing of ours on the VM either


def test_an_attached_vm_runs_a_job_and_a_pipeline_step_and_detach_leaves_it_as_it_was(
    api: httpx.Client, srv: RunningServer, vm: netns_hosts.SshHost
) -> None:
    before = home_listing(vm)
    response = attach(api, srv, vm_doc(vm))
    assert response.status_code in (200, 201), response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"], timeout=120)
    assert op["status"] == "Succeeded", op
    shown = wait_until(lambda: (c := compute(api, srv, VM))["state"] == "Idle" and c, 60, "the VM idle")
    assert shown["facts"]["os"] == "Linux" and shown["facts"]["cores"] >= 1, shown
    assert shown["capacity"]["vcpus"] == shown["facts"]["cores"]
    assert (Path(vm.home) / ".cloudlet-agent").is_dir()
    # The key attach logged in with is the VM's sshd's, kept and checked on every later login.
    sshd_key = (Path(vm.home).parent / "host_key.pub").read_text()
    assert shown["host_key"] == host_keys.describe(sshd_key), shown

    submit(api, srv, "vm-job", {"command": "echo ran on $(hostname -I)", "compute": f"azureml:{VM}"})
    done = wait_job(api, srv, "vm-job", timeout=120)
    assert done["status"] == "Completed", done
    assert f"ran on {vm.address}" in log_text(api, srv, "vm-job")

    pipeline = {
        "type": "pipeline",
        "jobs": {"on_vm": {"command": "echo step on $(hostname -I)", "compute": f"azureml:{VM}"}},
    }
    submit(api, srv, "vm-pipeline", pipeline)
    done = wait_job(api, srv, "vm-pipeline", timeout=180)
    assert done["status"] == "Completed", done
    [step] = done["children"]
    assert step["compute"] == VM, step
    assert f"step on {vm.address}" in log_text(api, srv, step["name"])

    # More jobs than cores: they queue and all run, never more at once than the VM's cores.
    cores = int(shown["facts"]["cores"])
    names = [f"vm-many-{i}" for i in range(cores + 1)]
    for name in names:
        submit(api, srv, name, {"command": "sleep 8", "compute": f"azureml:{VM}"})

    def full() -> list[str] | None:
        statuses = sorted(job(api, srv, n)["status"] for n in names)
        return statuses if statuses.count("Running") == cores and "Queued" in statuses else None

    wait_until(full, 60, f"{cores} jobs running (one per core) and the rest queued")
    assert compute(api, srv, VM)["state"] == "Running"
    assert [wait_job(api, srv, n, timeout=180)["status"] for n in names] == ["Completed"] * len(names)

    response = api.delete(f"{srv.ws_path}/computes/{VM}")
    assert response.status_code == 202, response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"], timeout=120)
    assert op["status"] == "Succeeded", op
    assert api.get(f"{srv.ws_path}/computes/{VM}").status_code == 404
    wait_until(lambda: not netns_hosts.host_processes(vm.user, "cloudlet.agent"), 30, "the VM's agent gone")
    assert not (Path(vm.home) / ".cloudlet-agent").exists()
    assert home_listing(vm) == before


def test_a_vm_whose_agent_dies_shows_unreachable_then_gets_a_new_agent_and_runs_jobs(
    api: httpx.Client, srv: RunningServer, vm: netns_hosts.SshHost
) -> None:
    name = "vm-again"
    yml = srv.home / "vm-again.yml"
    yml.write_text(yaml.safe_dump(vm_doc(vm, name)))
    attached = cli(srv, "compute", "attach", "--file", str(yml))  # waits for the operation
    assert attached.returncode == 0, attached.stderr
    assert json.loads(attached.stdout)["type"] == "virtualmachine"
    detached = False
    try:
        wait_until(lambda: compute(api, srv, name)["state"] == "Idle" or None, 60, "the VM idle")
        for pid in netns_hosts.host_processes(vm.user, ""):  # the agent and its watchdog
            os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: compute(api, srv, name)["state"] == "Unreachable" or None, 90, "the VM unreachable"
        )
        wait_until(lambda: compute(api, srv, name)["state"] == "Idle" or None, 120, "a new agent on the VM")
        submit(
            api, srv, "vm-again-job", {"command": "echo back on $(hostname -I)", "compute": f"azureml:{name}"}
        )
        assert wait_job(api, srv, "vm-again-job", timeout=120)["status"] == "Completed"
        assert f"back on {vm.address}" in log_text(api, srv, "vm-again-job")
        gone = cli(srv, "compute", "detach", "-n", name, "--yes")
        assert gone.returncode == 0, gone.stderr
        detached = True
        assert api.get(f"{srv.ws_path}/computes/{name}").status_code == 404
        assert not (Path(vm.home) / ".cloudlet-agent").exists()
    finally:
        if not detached:
            response = api.delete(f"{srv.ws_path}/computes/{name}")
            if response.status_code == 202:
                srv.wait_operation(api, response.headers["Operation-Location"], timeout=120)


def cli(srv: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cloudlet", *args, "-o", "json"]
    return subprocess.run(command, env=srv.cli_env(), capture_output=True, text=True, timeout=180)
