"""Providers by name: each location names its provider and holds that provider's configuration.

A provider kind is registered once with the pydantic model of its configuration (closed:
``extra="forbid"``) and a factory that builds an instance from a validated configuration and the
server's context. Nothing else in the server names a provider: locations are checked against
``REGISTRY`` (a bad name or configuration is a 400 naming the field), and ``ProviderSet``
(``providers/provider_set.py``) builds each location's provider from it.

A configuration is stored as given and rendered back to administrators, so it must not hold
secrets in the clear: a kind lists the fields that are secret (``secret_fields``) and renders show
them masked. The local provider has none.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cloudlet.domain.errors import validation_error
from cloudlet.providers import kube_config, ssh_config
from cloudlet.providers.base import NodeProvider, ProviderContext
from cloudlet.providers.kube_config import KubernetesConfig, kubernetes_provider
from cloudlet.providers.local import LocalProvider
from cloudlet.providers.slurm import SlurmConfig, SlurmProvider
from cloudlet.providers.ssh_config import SshConfig

ConfigT = TypeVar("ConfigT", bound=BaseModel)
DEFAULT_PROVIDER = "local"  # what a location without a named provider (and bootstrap's) uses
MASK = "***"


@dataclass(frozen=True)
class ProviderKind(Generic[ConfigT]):
    name: str
    config_model: type[ConfigT]
    factory: Callable[[ConfigT, ProviderContext], NodeProvider]
    description: str = ""
    secret_fields: frozenset[str] = frozenset()
    # The addresses a stored configuration tells agents to dial the server at (the server's TLS
    # certificate names them all: ``cloudlet/tls.py``).
    server_addresses: Callable[[Mapping[str, Any]], list[str]] = lambda _config: []


@dataclass
class ProviderRegistry:
    kinds: dict[str, ProviderKind[Any]] = field(default_factory=dict)

    def register(self, kind: ProviderKind[Any]) -> None:
        if kind.name in self.kinds:
            raise ValueError(f"provider {kind.name!r} is registered already")
        self.kinds[kind.name] = kind

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self.kinds))

    def kind(self, name: str) -> ProviderKind[Any]:
        """The kind named ``name``; a 400 naming ``provider`` and the registered ones otherwise."""
        found = self.kinds.get(name)
        if found is None:
            raise validation_error(
                "provider", f"provider '{name}' is not available; use one of: {', '.join(self.names())}"
            )
        return found

    def validate(self, name: str, config: Mapping[str, Any] | None) -> BaseModel:
        """The configuration checked against the kind's model; a 400 naming ``config.<field>``."""
        kind = self.kind(name)
        try:
            return kind.config_model.model_validate(dict(config or {}))
        except ValidationError as exc:
            # An unknown setting first: a misspelt one also makes the right one "missing".
            errors = exc.errors()
            first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
            where = ".".join(str(part) for part in first["loc"])
            target = f"config.{where}" if where else "config"
            message = first["msg"]
            if first["type"] == "extra_forbidden":
                model = _model_at(kind.config_model, first["loc"][:-1])
                fields = ", ".join(model.model_fields) or "no fields"
                message = f"provider '{name}' has no setting '{where}'; it takes {fields}"
            raise validation_error(target, f"{target}: {message}") from None

    def normalized(self, name: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
        """What is stored: the settings given, validated, in JSON form (defaults stay unstored, so
        a later release's defaults apply)."""
        return self.validate(name, config).model_dump(mode="json", exclude_unset=True)

    def build(self, name: str, config: Mapping[str, Any] | None, context: ProviderContext) -> NodeProvider:
        kind = self.kind(name)
        return kind.factory(self.validate(name, config), context)

    def server_addresses(self, name: str, config: Mapping[str, Any]) -> list[str]:
        """What a location of provider NAME with this stored configuration tells its agents the
        server is reached at (none for a kind that is not registered)."""
        kind = self.kinds.get(name)
        return kind.server_addresses(config) if kind is not None else []

    def masked(self, name: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """``config`` as shown to callers: secret fields masked."""
        kind = self.kinds.get(name)
        secret = kind.secret_fields if kind is not None else frozenset()
        return {k: (MASK if k in secret and v is not None else v) for k, v in config.items()}


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel]:
    """The (nested) model that the error location ``loc`` points into, e.g. ``hosts.0`` of a
    list of host models: the one whose fields an unknown setting there is told apart from."""
    for part in loc:
        if isinstance(part, int):
            continue
        field_info = model.model_fields.get(str(part))
        if field_info is None:
            return model
        candidates = [field_info.annotation, *get_args(field_info.annotation)]
        candidates += [a for c in list(candidates) for a in get_args(c)]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return model
        model = nested[0]
    return model


# -- the local provider -----------------------------------------------------------------------
class LocalConfig(BaseModel):
    """Nodes as agent processes on the server's host (``providers/local.py``)."""

    model_config = ConfigDict(extra="forbid")
    nodes_dir: str | None = Field(
        default=None, max_length=4096, description="where node directories live (default: <home>/nodes)"
    )
    env_cache: str | None = Field(
        default=None, max_length=4096, description="the job environments' cache (default: <home>/envs)"
    )
    cgroups: bool = Field(default=True, description="confine nodes by cgroup v1 CPU and memory limits")

    @field_validator("nodes_dir", "env_cache")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(value):
            raise ValueError("must be an absolute path")
        return value


def _local(config: LocalConfig, context: ProviderContext) -> NodeProvider:
    return LocalProvider(
        Path(config.nodes_dir) if config.nodes_dir else context.home / "nodes",
        python=sys.executable,
        cgroup_parent="cloudlet" if config.cgroups else None,
        env_cache=Path(config.env_cache) if config.env_cache else context.home / "envs",
    )


def _slurm(config: SlurmConfig, context: ProviderContext) -> NodeProvider:
    return SlurmProvider(config, context.home, python=sys.executable)


# -- SSH hosts -------------------------------------------------------------------------------------
def _ssh(config: SshConfig, context: ProviderContext) -> NodeProvider:
    from cloudlet.providers.ssh import SshProvider  # asyncssh is loaded only when a location uses it

    return SshProvider(
        config, context.home, context.installation_id, host_keys=context.host_keys, scope=context.scope
    )


def default_registry() -> ProviderRegistry:
    registry = ProviderRegistry()
    registry.register(
        ProviderKind("local", LocalConfig, _local, description="agent processes on the server's host")
    )
    registry.register(
        ProviderKind("slurm", SlurmConfig, _slurm, description="each node a placeholder Slurm allocation")
    )
    registry.register(
        ProviderKind(
            "kubernetes",
            KubernetesConfig,
            kubernetes_provider,
            description="pods running the node agent on a Kubernetes cluster",
            server_addresses=kube_config.server_addresses,
        )
    )
    registry.register(
        ProviderKind(
            "ssh",
            SshConfig,
            _ssh,
            description="agents on hosts reached over SSH (asyncssh)",
            server_addresses=ssh_config.server_addresses,
        )
    )
    return registry


REGISTRY = default_registry()
