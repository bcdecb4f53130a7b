"""Agent configuration, read from the environment the provider sets (see docs/agent-protocol.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

AGENT_VERSION = "1"
DEFAULT_ORPHAN_GRACE_S = 180.0


class ConfigError(ValueError):
    """A required variable is missing or malformed."""


def _num(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


@dataclass(frozen=True)
class AgentConfig:
    server: str
    node_id: str
    token: str
    node_dir: Path
    installation: str = ""
    vcpus: float | None = None
    memory_gb: float | None = None
    gpus: int | None = None
    ca_file: str | None = None
    shutdown_s: float = 1.8
    # The control plane unreachable this long: the node is orphaned (its server is gone for good,
    # or will treat it as lost), so it stops its processes and exits instead of running on.
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S
    # Where other nodes and the control plane's proxy reach this node (the provider knows; None:
    # the local address of the agent's connection to the control plane).
    node_address: str | None = None
    # What a stop by SIGTERM means for the runs it ends (``CLOUDLET_SIGNAL_MEANS``): "preempted"
    # on a batch engine's allocation (Slurm signals a placeholder it preempts), so its jobs are
    # requeued from their checkpoints instead of failing; None: the runs are canceled.
    signal_means: str | None = None
    # Whether this host sees the server's data root at the same paths (``CLOUDLET_SHARED_FILESYSTEM``,
    # default 1: a local node). 0: a run's inputs, outputs and checkpoints move over HTTP.
    shared_filesystem: bool = True

    @property
    def work_dir(self) -> Path:
        return self.node_dir / "work"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentConfig:
        env = os.environ if env is None else env
        missing = [
            name
            for name in ("CLOUDLET_SERVER", "CLOUDLET_NODE_ID", "CLOUDLET_NODE_TOKEN", "CLOUDLET_NODE_DIR")
            if not env.get(name)
        ]
        if missing:
            raise ConfigError("missing environment variables: " + ", ".join(missing))
        server = env["CLOUDLET_SERVER"].rstrip("/")
        if not server.startswith(("http://", "https://")):
            raise ConfigError(f"CLOUDLET_SERVER must be an http(s) URL, got {server!r}")
        gpus = _num(env, "CLOUDLET_NODE_GPUS")
        shutdown = _num(env, "CLOUDLET_AGENT_SHUTDOWN_S")
        grace = _num(env, "CLOUDLET_AGENT_ORPHAN_GRACE_S")
        if grace is not None and grace <= 0:
            raise ConfigError(f"CLOUDLET_AGENT_ORPHAN_GRACE_S must be positive, got {grace:g}")
        return cls(
            server=server,
            node_id=env["CLOUDLET_NODE_ID"],
            token=env["CLOUDLET_NODE_TOKEN"],
            node_dir=Path(env["CLOUDLET_NODE_DIR"]),
            installation=env.get("CLOUDLET_INSTALLATION", ""),
            vcpus=_num(env, "CLOUDLET_NODE_VCPUS"),
            memory_gb=_num(env, "CLOUDLET_NODE_MEMORY_GB"),
            gpus=None if gpus is None else int(gpus),
            ca_file=env.get("CLOUDLET_CA_FILE") or None,
            shutdown_s=1.8 if shutdown is None else shutdown,
            orphan_grace_s=DEFAULT_ORPHAN_GRACE_S if grace is None else grace,
            node_address=env.get("CLOUDLET_NODE_ADDRESS", "").strip() or None,
            signal_means=_signal_means(env.get("CLOUDLET_SIGNAL_MEANS", "")),
            shared_filesystem=_flag(env, "CLOUDLET_SHARED_FILESYSTEM", True),
        )


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no"):
        return False
    raise ConfigError(f"{name} must be 1 or 0, got {raw!r}")


SIGNAL_MEANINGS = ("preempted",)


def _signal_means(raw: str) -> str | None:
    value = raw.strip().lower()
    if not value:
        return None
    if value not in SIGNAL_MEANINGS:
        raise ConfigError(f"CLOUDLET_SIGNAL_MEANS must be one of {', '.join(SIGNAL_MEANINGS)}, got {raw!r}")
    return value


def log(message: str) -> None:
    """One line on stderr (the provider sends it to the node's agent.log)."""
    import sys
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(f"{stamp} cloudlet-agent: {message}", file=sys.stderr, flush=True)
