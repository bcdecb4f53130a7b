"""LocalProvider's pure parts: limits arithmetic, environment, /proc parsing, cgroup set-up on a
stand-in cgroup tree (plain directories)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cloudlet.providers import local
from cloudlet.providers.base import (
    NodeHandle,
    NodeProvider,
    NodeRequest,
    ProviderError,
    SupportsNodeLogs,
    SupportsResourceLimits,
)
from cloudlet.providers.local import (
    MEMORY_FLOOR_BYTES,
    LocalProvider,
    agent_env,
    cpu_quota_us,
    is_agent_cmdline,
    memory_limit_bytes,
    parse_environ,
    sandbox_env,
)


def request(**kw: object) -> NodeRequest:
    base: dict[str, object] = {
        "node_id": "n-1",
        "token": "secret",
        "installation_id": "inst-1",
        "server_url": "http://127.0.0.1:8571",
        "size": "Standard_DS3_v2",
        "vcpus": 4,
        "memory_gb": 14,
    }
    base.update(kw)
    return NodeRequest(**base)  # type: ignore[arg-type]


def test_cpu_quota_is_vcpus_times_period() -> None:
    assert cpu_quota_us(2) == 200_000
    assert cpu_quota_us(0.5, 50_000) == 25_000
    assert cpu_quota_us(0.001) == 1000  # the kernel's minimum


def test_memory_limit_has_a_floor() -> None:
    assert memory_limit_bytes(4) == 4 * 1024**3
    assert memory_limit_bytes(0.01) == MEMORY_FLOOR_BYTES == 256 * 1024**2


def test_parse_environ_and_agent_cmdline() -> None:
    env = parse_environ(b"A=1\0CLOUDLET_NODE_ID=n-1\0EMPTY=\0B=x=y\0\0")
    assert env == {"A": "1", "CLOUDLET_NODE_ID": "n-1", "EMPTY": "", "B": "x=y"}
    assert is_agent_cmdline(b"/usr/bin/python3\0-m\0cloudlet.agent\0")
    assert not is_agent_cmdline(b"bash\0-c\0echo python -m cloudlet.agent\0")


def test_agent_env_carries_the_protocol_and_not_the_hosts_secrets() -> None:
    base = {"PATH": "/usr/bin", "HOME": "/root", "LC_ALL": "C", "DATABASE_URL": "postgresql://secret"}
    env = agent_env(request(env={"CLOUDLET_CA_FILE": "/ca.pem"}), Path("/nodes/n-1"), sys.executable, base)
    assert env["CLOUDLET_SERVER"] == "http://127.0.0.1:8571" and env["CLOUDLET_NODE_TOKEN"] == "secret"
    assert env["CLOUDLET_NODE_DIR"] == "/nodes/n-1" and env["CLOUDLET_INSTALLATION"] == "inst-1"
    sizes = (env["CLOUDLET_NODE_VCPUS"], env["CLOUDLET_NODE_MEMORY_GB"], env["CLOUDLET_NODE_GPUS"])
    assert sizes == ("4", "14", "0")
    assert env["CLOUDLET_CA_FILE"] == "/ca.pem" and env["LC_ALL"] == "C" and "DATABASE_URL" not in env
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert "PYTHONPATH" not in env  # the server's own interpreter already imports cloudlet


def test_cgroups_are_made_and_limited_on_a_writable_tree(tmp_path: Path) -> None:
    for controller in ("cpu", "memory"):
        (tmp_path / controller).mkdir()
    (tmp_path / "cpu" / "cloudlet" / "n-1").mkdir(parents=True)
    (tmp_path / "cpu" / "cloudlet" / "n-1" / "cpu.cfs_period_us").write_text("100000\n")
    provider = LocalProvider(tmp_path / "nodes", cgroup_root=tmp_path)
    dirs, note = provider._setup_cgroups(request(vcpus=1.5, memory_gb=0.1))
    assert note is None
    assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text() == "150000"
    assert (dirs["memory"] / "memory.limit_in_bytes").read_text() == str(MEMORY_FLOOR_BYTES)
    handle = NodeHandle("n-1", {"cgroups": {c: str(p) for c, p in dirs.items()}})
    assert provider.resource_limits(handle) == {
        "cpu_quota_us": 150000,
        "cpu_period_us": 100000,
        "memory_bytes": MEMORY_FLOOR_BYTES,
    }


def test_cgroups_are_skipped_with_a_note_when_unavailable(tmp_path: Path) -> None:
    provider = LocalProvider(tmp_path / "nodes", cgroup_root=tmp_path / "no-cgroups")
    dirs, note = provider._setup_cgroups(request())
    assert dirs == {} and note and "not applied" in note
    dirs, note = LocalProvider(tmp_path, cgroup_parent=None)._setup_cgroups(request())
    assert dirs == {} and note and "disabled" in note
    assert provider.resource_limits(NodeHandle("n-1", {})) is None


def test_provider_protocols_and_handle_round_trip(tmp_path: Path) -> None:
    provider = LocalProvider(tmp_path)
    assert isinstance(provider, NodeProvider) and provider.kind == "local"
    assert isinstance(provider, SupportsResourceLimits) and isinstance(provider, SupportsNodeLogs)
    handle = NodeHandle("n-1", {"pid": 12, "cgroups": {}})
    assert NodeHandle.from_json(handle.to_json()) == handle
    (tmp_path / "agent.log").write_text("x" * 10 + "tail")
    log_handle = NodeHandle("n-1", {"agent_log": str(tmp_path / "agent.log")})
    assert provider.node_log(log_handle, tail_bytes=4) == "tail"


def test_sandbox_settings_come_from_the_servers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    found = {"bwrap": "/usr/bin/bwrap", "setpriv": "/usr/bin/setpriv", "unshare": "/usr/bin/unshare"}
    monkeypatch.setattr(local.shutil, "which", found.get)
    assert sandbox_env({}) == {"CLOUDLET_SANDBOX": "bwrap"}
    assert sandbox_env({"CLOUDLET_SANDBOX_UID": "2000", "CLOUDLET_SANDBOX_GID": "2000"}) == {
        "CLOUDLET_SANDBOX": "bwrap",
        "CLOUDLET_SANDBOX_UID": "2000",
        "CLOUDLET_SANDBOX_GID": "2000",
    }
    assert sandbox_env({"CLOUDLET_SANDBOX": "none"}) == {"CLOUDLET_SANDBOX": "none"}
    # A bwrap per job run instead of the node's launcher (to compare them, or where it fails).
    assert sandbox_env({"CLOUDLET_LAUNCHER": "off"}) == {
        "CLOUDLET_SANDBOX": "bwrap",
        "CLOUDLET_LAUNCHER": "off",
    }
    with pytest.raises(ProviderError, match="unprivileged"):
        sandbox_env({"CLOUDLET_SANDBOX_UID": "0"})
    with pytest.raises(ProviderError, match="bwrap or none"):
        sandbox_env({"CLOUDLET_SANDBOX": "chroot"})


def test_a_node_without_bwrap_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(local.shutil, "which", lambda name: None)
    monkeypatch.delenv("CLOUDLET_SANDBOX", raising=False)
    with pytest.raises(ProviderError, match=r"apt-get install bubblewrap.*CLOUDLET_SANDBOX=none"):
        LocalProvider(tmp_path / "nodes", cgroup_parent=None).create(request())
    assert not (tmp_path / "nodes").exists()  # nothing made
    # Explicitly turned off (development only), the node is made without it.
    assert sandbox_env({"CLOUDLET_SANDBOX": "none"}) == {"CLOUDLET_SANDBOX": "none"}
