"""Which nodes move jobs' data over HTTP: each provider's ``shared_filesystem`` and its default
(docs/providers.md says why), as the agent's ``CLOUDLET_SHARED_FILESYSTEM``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudlet.agent.config import AgentConfig, ConfigError
from cloudlet.domain.compute import attached_vms as vm
from cloudlet.providers.base import NodeRequest
from cloudlet.providers.kube_pods import PodSettings, agent_environment
from cloudlet.providers.slurm import SlurmConfig
from cloudlet.providers.ssh_config import SshConfig

BASE = {
    "CLOUDLET_SERVER": "https://10.0.0.1:8443",
    "CLOUDLET_NODE_ID": "n-1",
    "CLOUDLET_NODE_TOKEN": "t",
    "CLOUDLET_NODE_DIR": "/tmp/n-1",
}


def test_the_agent_reads_whether_its_host_shares_the_servers_disk() -> None:
    assert AgentConfig.from_env(BASE).shared_filesystem is True  # a local node: unset
    for raw, shared in (("0", False), ("false", False), ("1", True), (" TRUE ", True)):
        assert AgentConfig.from_env({**BASE, "CLOUDLET_SHARED_FILESYSTEM": raw}).shared_filesystem is shared
    with pytest.raises(ConfigError, match="CLOUDLET_SHARED_FILESYSTEM must be 1 or 0"):
        AgentConfig.from_env({**BASE, "CLOUDLET_SHARED_FILESYSTEM": "maybe"})


def test_ssh_hosts_and_attached_vms_default_to_http_slurm_to_its_shared_filesystem(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("key")
    host = {"address": "10.0.0.4", "user": "u", "identity_file": str(key)}
    assert SshConfig.model_validate({"hosts": [host]}).shared_filesystem is False
    assert SshConfig.model_validate({"hosts": [host], "shared_filesystem": True}).shared_filesystem is True
    assert SlurmConfig.model_validate({"partition": "batch"}).shared_filesystem is True
    doc = {"type": "virtualmachine", "address": "10.0.0.4"}
    ssh = {"admin_username": "u", "ssh_private_key_file": str(key)}
    assert vm.provider_config({**doc, "ssh_settings": ssh})["shared_filesystem"] is False
    shared = {**doc, "ssh_settings": ssh, "shared_filesystem": True}
    assert SshConfig.model_validate(vm.provider_config(shared)).shared_filesystem is True


def test_a_kubernetes_pod_always_moves_data_over_http() -> None:
    req = NodeRequest("n-1", "t", "inst", "https://s", "Standard_DS3_v2", 4, 14)
    env = {e["name"]: e.get("value") for e in agent_environment(req, PodSettings("ns", "img"), "secret")}
    assert env["CLOUDLET_SHARED_FILESYSTEM"] == "0"
