"""Agent configuration, read from the environment the provider sets (see docs/agent-protocol.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

AGENT_VERSION = "1"


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
        )


def log(message: str) -> None:
    """One line on stderr (the provider sends it to the node's agent.log)."""
    import sys
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    print(f"{stamp} cloudlet-agent: {message}", file=sys.stderr, flush=True)
