"""Attached VMs (``type: virtualmachine`` with an ``address``): pure rules.

An attached VM is a machine someone else made that cloudlet reaches over SSH. Attaching checks it
and installs the agent (``services/compute/attached_vms.py``); while attached it runs one node that holds
the whole machine (its cores are the capacity: jobs side by side, a vCPU per process, the rest
queue), made by an SSH provider of its own, keyed ``provider_key(compute id)``. Detaching stops
the agent and removes its folder. A VM given only by an Azure ``resource_id`` is a record: cloudlet
cannot resolve an Azure resource id to an address, so it cannot run jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudlet.domain.compute import host_keys
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.sizes import VmSize
from cloudlet.domain.errors import CloudletError, validation_error

PROVIDER_PREFIX = "vm:"  # no location name has a colon: no clash
SIZE_NAME = "AttachedVM"
AGENT_DIR = ".cloudlet-agent"  # under the admin user's home; detach removes it whole


def provider_key(compute_id: int) -> str:
    """The provider set's key (and the nodes' ``location``) for the VM's own SSH provider."""
    return f"{PROVIDER_PREFIX}{compute_id}"


def is_attached(doc: Mapping[str, Any]) -> bool:
    """A VM cloudlet reaches (an ``address``), not an Azure record only."""
    return doc.get("type") == ComputeType.VIRTUAL_MACHINE and bool(doc.get("address"))


def host_config(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The VM's stored document as one SSH host (``providers.ssh_config.SshHostConfig``); a
    400 naming the field when ``ssh_settings`` cannot log in with a key."""
    ssh = doc.get("ssh_settings") or {}
    if ssh.get("admin_password"):
        raise validation_error(
            "ssh_settings.admin_password",
            "cloudlet logs in to attached VMs with a key only: remove admin_password and set "
            "ssh_settings.ssh_private_key_file (the private key's path on the server)",
        )
    user = ssh.get("admin_username")
    if not user:
        raise validation_error(
            "ssh_settings.admin_username", "an attached VM needs ssh_settings.admin_username (the login)"
        )
    key = ssh.get("ssh_private_key_file")
    if not key:
        raise validation_error(
            "ssh_settings.ssh_private_key_file",
            "an attached VM needs ssh_settings.ssh_private_key_file: the private key's absolute path "
            "on the cloudlet server",
        )
    if not str(key).startswith("/"):
        raise validation_error(
            "ssh_settings.ssh_private_key_file",
            f"ssh_settings.ssh_private_key_file '{key}' must be an absolute path on the cloudlet server",
        )
    return {
        "address": str(doc["address"]),
        "port": int(ssh.get("ssh_port") or 22),
        "user": str(user),
        "identity_file": str(key),
    }


def provider_config(doc: Mapping[str, Any], connect_timeout_s: float = 10.0) -> dict[str, Any]:
    """The SSH provider's configuration for the VM: one host, the agent in ``AGENT_DIR``; jobs'
    data over HTTP unless the compute says ``shared_filesystem: true``."""
    return {
        "hosts": [host_config(doc)],
        "agent_dir": AGENT_DIR,
        "connect_timeout_s": connect_timeout_s,
        "shared_filesystem": doc.get("shared_filesystem") is True,
    }


def vm_size(facts: Mapping[str, Any]) -> VmSize:
    """The node's shape: the whole VM, as its probe found it."""
    cores = int(facts.get("cores") or 0)
    if cores < 1:
        raise CloudletError("VirtualMachineUnusable", "the VM's cores are not known (attach it again)")
    gpus = list(facts.get("gpus") or [])
    return VmSize(
        name=SIZE_NAME,
        series="attached",
        family="attachedVMFamily",
        vcpus=cores,
        memory_gb=float(facts.get("memory_gb") or 0),
        gpus=len(gpus),
        gpu_model=str(gpus[0]) if gpus else None,
        gpu_architecture=None,
        temp_disk_gb=0,
        max_data_disks=0,
        price_dedicated=0.0,
        price_low_priority=None,
        isolated=False,
        rdma=False,
        premium_io=False,
    )


NODE_STATES = {
    "requested": "Starting",
    "allocated": "Starting",
    "starting": "Starting",
    "idle": "Idle",
    "busy": "Running",
    "draining": "Detaching",
    "terminating": "Detaching",
    "terminated": "Detached",
}


def vm_state(provisioning_state: str, node_state: str | None) -> str:
    """What ``compute show`` says of the VM: Idle / Running (jobs) / Starting / Unreachable …"""
    if provisioning_state == "Deleting":
        return "Detaching"
    if provisioning_state == "Failed":
        return "Failed"
    if node_state is None:
        return "Starting" if provisioning_state in ("Creating", "Updating") else "Unreachable"
    return NODE_STATES.get(node_state, "Unreachable")


SHOWN_FACTS = ("os", "arch", "cores", "memory_gb", "python_version", "gpus")


def view(doc: Mapping[str, Any], provisioning_state: str, node_states: list[str]) -> dict[str, Any]:
    """The VM's part of ``compute show``: its state, facts and capacity (pure)."""
    if not is_attached(doc):
        return {"state": "Detached" if provisioning_state == "Deleting" else "Unknown"}
    facts = dict(doc.get("facts") or {})
    serving = [s for s in node_states if s in ("idle", "busy")]
    node_state = serving[0] if serving else (node_states[0] if node_states else None)
    return {
        "state": vm_state(provisioning_state, node_state),
        "facts": {
            k: facts[k] for k in ("os", "arch", "cores", "memory_gb", "python_version", "gpus") if k in facts
        },
        "capacity": {"vcpus": int(facts.get("cores") or 0), "memory_gb": facts.get("memory_gb")},
        # The host key attach logged in with; every later login must see it (docs/security.md).
        **({"host_key": host_keys.describe(facts["host_key"])} if facts.get("host_key") else {}),
    }
