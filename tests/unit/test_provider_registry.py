"""The provider registry and ProviderSet: names to kinds, closed configurations (a 400 naming the
field), one instance per location and configuration, rebuilt when the configuration changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from cloudlet.domain.errors import CloudletError
from cloudlet.providers.base import NodeHandle, NodeProvider, NodeRequest
from cloudlet.providers.local import LocalProvider
from cloudlet.providers.provider_set import LocationProvider, ProviderSet
from cloudlet.providers.registry import (
    MASK,
    REGISTRY,
    ProviderContext,
    ProviderKind,
    ProviderRegistry,
    default_registry,
)

CONTEXT = ProviderContext(Path("/srv/cloudlet-home"), "inst-1")


class VaultConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    endpoint: str
    password: str | None = None


class RecordingProvider:
    kind = "vault"

    def __init__(self, config: VaultConfig) -> None:
        self.config = config

    def create(self, req: NodeRequest) -> NodeHandle:
        return NodeHandle(req.node_id)

    def terminate(self, handle: NodeHandle) -> None:
        pass

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        return []


def _vault(config: VaultConfig, context: ProviderContext) -> NodeProvider:
    return RecordingProvider(config)


def registry_with_vault() -> ProviderRegistry:
    registry = default_registry()
    registry.register(ProviderKind("vault", VaultConfig, _vault, secret_fields=frozenset({"password"})))
    return registry


def refusal(call: Any) -> CloudletError:
    with pytest.raises(CloudletError) as refused:
        call()
    assert refused.value.status == 400
    return refused.value


def test_local_is_registered_and_builds_under_the_home_by_default() -> None:
    assert "local" in REGISTRY.names()
    provider = REGISTRY.build("local", {}, CONTEXT)
    assert isinstance(provider, LocalProvider)
    assert provider.root == CONTEXT.home / "nodes" and provider.env_cache == CONTEXT.home / "envs"
    assert provider.cgroup_parent == "cloudlet"


def test_local_settings_reach_the_provider() -> None:
    config = {"nodes_dir": "/data/lab-nodes", "env_cache": "/data/envs", "cgroups": False}
    provider = REGISTRY.build("local", config, CONTEXT)
    assert isinstance(provider, LocalProvider)
    assert provider.root == Path("/data/lab-nodes") and provider.env_cache == Path("/data/envs")
    assert provider.cgroup_parent is None


def test_unknown_provider_names_the_field_and_the_registered_ones() -> None:
    error = refusal(lambda: REGISTRY.validate("nosuch", {}))
    assert error.target == "provider" and "'nosuch'" in error.message and "local" in error.message


def test_unknown_setting_names_its_path_and_the_settings_there_are() -> None:
    error = refusal(lambda: REGISTRY.validate("local", {"nodes_directory": "/x"}))
    assert error.target == "config.nodes_directory"
    assert "nodes_dir" in error.message and "cgroups" in error.message


def test_bad_setting_value_names_the_field() -> None:
    error = refusal(lambda: REGISTRY.validate("local", {"nodes_dir": "relative/path"}))
    assert error.target == "config.nodes_dir" and "absolute" in error.message
    assert refusal(lambda: REGISTRY.validate("local", {"cgroups": "maybe"})).target == "config.cgroups"


def test_missing_required_setting_names_it() -> None:
    error = refusal(lambda: registry_with_vault().validate("vault", {}))
    assert error.target == "config.endpoint"


def test_stored_form_keeps_only_what_was_given() -> None:
    assert REGISTRY.normalized("local", {"cgroups": False}) == {"cgroups": False}
    assert REGISTRY.normalized("local", None) == {}


def test_secret_settings_are_masked_in_renders() -> None:
    registry = registry_with_vault()
    shown = registry.masked("vault", {"endpoint": "https://v", "password": "hunter2"})
    assert shown == {"endpoint": "https://v", "password": MASK}
    assert registry.masked("local", {"nodes_dir": "/x"}) == {"nodes_dir": "/x"}


def test_a_kind_is_registered_once() -> None:
    registry = default_registry()
    with pytest.raises(ValueError, match="local"):
        registry.register(ProviderKind("local", VaultConfig, _vault))


class Locations:
    """The locations a ProviderSet reads (a store's rows, here a list the test edits)."""

    def __init__(self, *rows: LocationProvider) -> None:
        self.rows = list(rows)
        self.reads = 0

    def __call__(self) -> list[LocationProvider]:
        self.reads += 1
        return list(self.rows)


def provider_set(locations: Locations, refresh_s: float = 0.0) -> ProviderSet:
    return ProviderSet(registry_with_vault(), CONTEXT, locations, refresh_s=refresh_s)


def test_each_location_gets_its_providers_instance_built_once() -> None:
    locations = Locations(
        LocationProvider("local", "local"),
        LocationProvider("lab", "local", {"nodes_dir": "/data/lab"}),
        LocationProvider("vault-east", "vault", {"endpoint": "https://east"}),
    )
    providers = provider_set(locations)
    assert sorted(providers) == ["lab", "local", "vault-east"] and len(providers) == 3
    lab, local = providers["lab"], providers["local"]
    assert isinstance(lab, LocalProvider) and lab.root == Path("/data/lab")
    assert isinstance(local, LocalProvider) and local.root == CONTEXT.home / "nodes"
    assert providers["lab"] is lab  # built once
    east = providers["vault-east"]
    assert isinstance(east, RecordingProvider) and east.config.endpoint == "https://east"
    assert dict(providers.items()).keys() == {"lab", "local", "vault-east"}


def test_locations_with_the_same_provider_and_settings_share_an_instance() -> None:
    providers = provider_set(Locations(LocationProvider("local", "local"), LocationProvider("edge", "local")))
    assert providers["edge"] is providers["local"]


def test_a_changed_configuration_rebuilds_the_provider() -> None:
    locations = Locations(LocationProvider("lab", "local", {"nodes_dir": "/data/a"}))
    providers = provider_set(locations)
    before = providers["lab"]
    locations.rows = [LocationProvider("lab", "local", {"nodes_dir": "/data/b"})]
    after = providers["lab"]
    assert after is not before and isinstance(after, LocalProvider) and after.root == Path("/data/b")


def test_locations_are_read_again_only_after_refresh_s_or_on_a_miss() -> None:
    now = [0.0]
    locations = Locations(LocationProvider("local", "local"))
    providers = ProviderSet(registry_with_vault(), CONTEXT, locations, refresh_s=5.0, clock=lambda: now[0])
    providers["local"]
    providers["local"]
    assert locations.reads == 1
    locations.rows.append(LocationProvider("new", "local", {"cgroups": False}))
    new = providers["new"]  # a miss reads again: a location made a moment ago is found
    assert isinstance(new, LocalProvider) and new.cgroup_parent is None and locations.reads == 2
    now[0] = 6.0
    list(providers)
    assert locations.reads == 3
    providers.refresh()
    providers["local"]
    assert locations.reads == 4


def test_nodes_recorded_with_a_provider_kind_still_resolve() -> None:
    providers = provider_set(Locations(LocationProvider("lab", "local", {"nodes_dir": "/data/lab"})))
    legacy = providers["local"]  # no location 'local': the kind, with its default settings
    assert isinstance(legacy, LocalProvider) and legacy.root == CONTEXT.home / "nodes"


def test_an_unknown_location_is_a_key_error_and_get_answers_none() -> None:
    providers = provider_set(Locations())
    with pytest.raises(KeyError, match="nowhere"):
        providers["nowhere"]
    assert providers.get("nowhere") is None and "nowhere" not in providers


def test_the_addresses_a_location_tells_its_agents_to_dial() -> None:
    """What the server's TLS certificate must name (cloudlet/tls.py): an SSH location's
    server_address, a Kubernetes location's https server_url host; nothing else."""
    assert REGISTRY.server_addresses("ssh", {"hosts": [], "server_address": "10.0.0.1"}) == ["10.0.0.1"]
    assert REGISTRY.server_addresses("ssh", {"hosts": []}) == []
    kube = {"server_url": "https://cloudlet.lab:8572"}
    assert REGISTRY.server_addresses("kubernetes", kube) == ["cloudlet.lab"]
    assert REGISTRY.server_addresses("kubernetes", {"server_url": "http://10.0.0.2:8571"}) == []
    assert REGISTRY.server_addresses("local", {}) == []
    assert REGISTRY.server_addresses("no-such-kind", {"server_address": "x"}) == []
