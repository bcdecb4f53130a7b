"""The pure rules of attached VMs (``domain/compute/attached_vms.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from cloudlet.domain.compute import attached_vms as vm
from cloudlet.domain.errors import CloudletError


def doc(**ssh: Any) -> dict[str, Any]:
    settings = {"admin_username": "azureuser", "ssh_private_key_file": "/keys/id", **ssh}
    return {"name": "vm1", "type": "virtualmachine", "address": "10.0.0.4", "ssh_settings": settings}


def test_the_vm_is_one_ssh_host_with_azures_field_names_mapped() -> None:
    assert vm.host_config(doc(ssh_port=2222)) == {
        "address": "10.0.0.4",
        "port": 2222,
        "user": "azureuser",
        "identity_file": "/keys/id",
    }
    assert vm.host_config(doc())["port"] == 22
    config = vm.provider_config(doc())
    assert config["agent_dir"] == vm.AGENT_DIR and len(config["hosts"]) == 1


@pytest.mark.parametrize(
    ("ssh", "target"),
    [
        ({"admin_password": "pw"}, "ssh_settings.admin_password"),
        ({"admin_username": None}, "ssh_settings.admin_username"),
        ({"ssh_private_key_file": None}, "ssh_settings.ssh_private_key_file"),
        ({"ssh_private_key_file": "~/.ssh/id_rsa"}, "ssh_settings.ssh_private_key_file"),
    ],
)
def test_settings_that_cannot_log_in_with_a_key_are_a_400_naming_the_field(
    ssh: dict[str, Any], target: str
) -> None:
    with pytest.raises(CloudletError) as caught:
        vm.host_config(doc(**ssh))
    assert caught.value.status == 400 and caught.value.target == target


def test_only_a_vm_with_an_address_is_attached() -> None:
    assert vm.is_attached(doc())
    assert not vm.is_attached({"type": "virtualmachine", "resource_id": "/subscriptions/s/vm1"})
    assert not vm.is_attached({**doc(), "type": "amlcompute"})


def test_the_node_is_the_whole_vm() -> None:
    size = vm.vm_size({"cores": 8, "memory_gb": 31.2, "gpus": ["NVIDIA H200"]})
    assert (size.vcpus, size.memory_gb, size.gpus, size.gpu_model) == (8, 31.2, 1, "NVIDIA H200")
    with pytest.raises(CloudletError):
        vm.vm_size({})


def test_provider_keys_cannot_be_location_names() -> None:
    assert ":" in vm.provider_key(3)


@pytest.mark.parametrize(
    ("provisioning", "nodes", "state"),
    [
        ("Creating", [], "Starting"),
        ("Deleting", ["idle"], "Detaching"),
        ("Failed", [], "Failed"),
        ("Succeeded", [], "Unreachable"),
        ("Succeeded", ["busy"], "Running"),
        ("Succeeded", ["idle"], "Idle"),
        ("Succeeded", ["lost"], "Unreachable"),
        ("Succeeded", ["starting"], "Starting"),
    ],
)
def test_the_vms_state(provisioning: str, nodes: list[str], state: str) -> None:
    facts = {"os": "Linux", "cores": 2, "memory_gb": 4.0, "home": "/home/u"}
    shown = vm.view({**doc(), "facts": facts}, provisioning, nodes)
    assert shown["state"] == state
    assert shown["facts"] == {"os": "Linux", "cores": 2, "memory_gb": 4.0}  # not its home
    assert shown["capacity"] == {"vcpus": 2, "memory_gb": 4.0}
