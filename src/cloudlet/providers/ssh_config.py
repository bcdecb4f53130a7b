"""The configuration of an SSH location (closed: an unknown setting is a 400 naming it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cloudlet.domain.compute.host_keys import normalize


class SshHostConfig(BaseModel):
    """One host: where to log in, as whom, with which private key (a file on the server)."""

    model_config = ConfigDict(extra="forbid")
    address: str = Field(min_length=1, max_length=255, description="host name or IP address")
    port: int = Field(default=22, ge=1, le=65535)
    user: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    identity_file: str = Field(
        min_length=1, max_length=4096, description="the private key's path on the server (absolute)"
    )
    host_key: str | None = Field(
        default=None,
        max_length=16384,
        description="the host's public key, pinned (OpenSSH format, as ssh-keyscan prints it without the "
        "host name); default: the known_hosts file, else the key learned on first use",
    )

    @field_validator("host_key")
    @classmethod
    def _openssh_key(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return normalize(value)
        except ValueError as exc:
            raise ValueError(f"{exc}, e.g. 'ssh-ed25519 AAAAC3Nza…'") from None

    @field_validator("identity_file")
    @classmethod
    def _key_exists(cls, value: str) -> str:
        if not os.path.isabs(value):
            raise ValueError("must be an absolute path on the server")
        if not os.path.isfile(value):
            raise ValueError(f"no such file on the server: {value}")
        if not os.access(value, os.R_OK):
            raise ValueError(f"the server cannot read {value}")
        return value


class SshConfig(BaseModel):
    """Nodes as agents on hosts reached over SSH (``providers/ssh.py``)."""

    model_config = ConfigDict(extra="forbid")
    hosts: list[SshHostConfig] = Field(min_length=1, max_length=1000)
    proxy_jump: SshHostConfig | None = Field(
        default=None, description="a bastion every host is reached through"
    )
    agent_dir: str = Field(
        default=".cloudlet-agent",
        min_length=1,
        max_length=1024,
        description="where the agent and its nodes live on each host (relative: to the login's home)",
    )
    python: str = Field(
        default="python3", min_length=1, max_length=1024, description="the hosts' Python (>= 3.10)"
    )
    sandbox: Literal["none", "bwrap"] = Field(
        default="none", description="run jobs in a bubblewrap sandbox on the host (it needs bwrap there)"
    )
    tls: bool = Field(default=True, description="agents dial the server's HTTPS listener, checked by its CA")
    server_address: str | None = Field(
        default=None,
        max_length=255,
        description="the address hosts reach the server at (default: its --host)",
    )
    known_hosts: str | None = Field(
        default=None,
        max_length=4096,
        description="a known_hosts file to check host keys by (default: keys learned on first use)",
    )
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300)
    overcommit: float = Field(
        default=1.0, ge=1.0, le=64.0, description="slice each host's cores and memory this many times over"
    )
    shared_filesystem: bool = Field(
        default=False,
        description="the hosts see the server's data folder at the same path (else: jobs' inputs, "
        "outputs and checkpoints move over the server's HTTPS API)",
    )

    @field_validator("known_hosts")
    @classmethod
    def _known_hosts_file(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isfile(value):
            raise ValueError(f"no such file on the server: {value}")
        return value

    @model_validator(mode="after")
    def _distinct(self) -> SshConfig:
        seen: set[tuple[str, int, str]] = set()
        for i, host in enumerate(self.hosts):
            key = (host.address, host.port, host.user)
            if key in seen:
                raise ValueError(f"hosts[{i}] repeats {host.user}@{host.address}:{host.port}")
            seen.add(key)
        return self


def server_addresses(config: Mapping[str, Any]) -> list[str]:
    """The address a stored SSH configuration tells its hosts' agents to dial the server at (its
    TLS certificate must name it: ``cloudlet/tls.py``)."""
    address = config.get("server_address")
    return [str(address)] if address else []
