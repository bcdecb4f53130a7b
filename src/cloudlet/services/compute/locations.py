"""Locations: pools of capacity behind one provider and its configuration (administrators add,
change and remove them). Every front door (the REST routes, a future ARM facade) calls these."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute import attached_vms as vm_rules
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.errors import CloudletError, not_found, validation_error
from cloudlet.providers.provider_set import LocationProvider
from cloudlet.providers.registry import DEFAULT_PROVIDER, REGISTRY, ProviderRegistry
from cloudlet.services.access import audit
from cloudlet.services.compute import host_keys
from cloudlet.services.core import effects
from cloudlet.services.core.bootstrap import DEFAULT_LOCAL_CAPACITY
from cloudlet.store.schema import Compute, Location, Node, QuotaLimit, ResourceGroup, Workspace

CAPACITY_FIELDS = ("vcpus", "memory_gb", "gpus", "overcommit")
LOCATION_NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")


@dataclass(frozen=True)
class LocationChange:
    """What a create or update asks for; None keeps the current value (a new location: the
    default provider, its default configuration, the local capacity defaults)."""

    provider: str | None = None
    config: Mapping[str, Any] | None = None
    capacity: Mapping[str, float] | None = None  # only the fields given change
    accept_host_keys: Sequence[str] = ()  # SSH host keys to trust from now on


def location_target(name: str) -> str:
    return f"/locations/{name}"


def put(
    session: Session,
    name: str,
    change: LocationChange,
    actor: str,
    registry: ProviderRegistry = REGISTRY,
) -> tuple[dict[str, Any], bool]:
    """Add or change a location (committed): its view, and True when it was created. A provider change without
    a configuration starts from the new provider's defaults (the old settings are not its).
    ``change.accept_host_keys``: SSH host keys to trust from now on (a changed host's)."""
    if not LOCATION_NAME.fullmatch(name):
        raise validation_error(
            "name", "a location name is lower-case letters, digits and '-', starting with a letter (≤ 64)"
        )
    capacity = dict(change.capacity or {})
    unknown = sorted(set(capacity) - set(CAPACITY_FIELDS))
    if unknown:
        raise validation_error(f"capacity.{unknown[0]}", f"capacity takes {', '.join(CAPACITY_FIELDS)}")
    row = session.get(Location, name)
    created = row is None
    old = None if row is None else _state(row)
    provider = change.provider or (row.provider if row is not None else DEFAULT_PROVIDER)
    if change.config is not None:
        config = registry.normalized(provider, change.config)
    elif row is not None and row.provider == provider:
        config = dict(row.config or {})
    else:
        config = registry.normalized(provider, {})
    if row is None:
        row = Location(name=name, provider=provider, config={}, capacity={})
        session.add(row)
    row.provider, row.config = provider, config
    row.capacity = {**DEFAULT_LOCAL_CAPACITY, **(row.capacity or {}), **capacity}
    new = _state(row)
    if new != old:
        details = {"old": _shown(old), "new": _shown(new)}
        audit.record(session, actor, "location.write", location_target(name), details)
    session.flush()
    if change.accept_host_keys:
        host_keys.accept_for_location(session, row, list(change.accept_host_keys), actor)
    effects.demand_changed(session)
    shown = view(session, row)
    session.commit()
    return shown, created


def view(session: Session, row: Location) -> dict[str, Any]:
    shown = render(row)
    if row.provider == "ssh":  # keys learned on first use, and changed ones refused since
        shown["host_keys"] = host_keys.view(session, row.name)
    return shown


def get(session: Session, name: str) -> Location:
    row = session.get(Location, name)
    if row is None:
        raise not_found("Location", name)
    return row


def delete(session: Session, name: str, actor: str) -> None:
    """Remove a location nothing uses: no resource group, workspace, compute, live node or quota
    override names it (a 409 says which does)."""
    row = get(session, name)
    users = (
        ("resource group", ResourceGroup.location),
        ("workspace", Workspace.location),
        ("compute", Compute.location),
        ("node", Node.location),
        ("quota override", QuotaLimit.location),
    )
    for what, column in users:
        if session.scalar(select(exists().where(column == name))):
            raise CloudletError(
                "LocationInUse",
                f"location '{name}' is in use: a {what} is in it; move or delete it first",
                name,
                409,
            )
    audit.record(session, actor, "location.delete", location_target(name), {"old": _shown(_state(row))})
    host_keys.forget_scope(session, name)
    session.delete(row)
    effects.demand_changed(session)
    session.commit()


def providers(registry: ProviderRegistry = REGISTRY) -> list[dict[str, Any]]:
    """The registered providers: name, description and the JSON Schema of their settings."""
    return [
        {
            "name": kind.name,
            "description": kind.description,
            "config_schema": kind.config_model.model_json_schema(),
            "secret_fields": sorted(kind.secret_fields),
        }
        for kind in (registry.kinds[name] for name in registry.names())
    ]


def list_all(session: Session) -> list[Location]:
    return list(session.scalars(select(Location).order_by(Location.name)))


def provider_settings(session: Session) -> list[LocationProvider]:
    """Every location's provider and configuration (what ``ProviderSet`` builds providers from)."""
    rows = session.execute(select(Location.name, Location.provider, Location.config)).all()
    found = [LocationProvider(name, provider, dict(config or {})) for name, provider, config in rows]
    return found + attached_vm_providers(session)


def server_addresses(session: Session, registry: ProviderRegistry = REGISTRY) -> list[str]:
    """Every address a location tells its agents to dial the server at (an SSH location's
    ``server_address``, a Kubernetes location's https ``server_url``): the names the server's TLS
    certificate must carry (``cloudlet/tls.py``)."""
    found: dict[str, None] = {}
    for setting in provider_settings(session):
        found.update(dict.fromkeys(registry.server_addresses(setting.provider, setting.config)))
    return list(found)


def attached_vm_providers(session: Session) -> list[LocationProvider]:
    """Each attached VM's own SSH provider (``domain/compute/attached_vms``: keyed by the compute's id)."""
    vms = session.execute(
        select(Compute.id, Compute.spec).where(Compute.type == ComputeType.VIRTUAL_MACHINE)
    ).all()
    found = []
    for compute_id, spec in vms:
        if vm_rules.is_attached(spec) and spec.get("facts"):
            config = vm_rules.provider_config(spec)
            found.append(LocationProvider(vm_rules.provider_key(compute_id), "ssh", config))
    return found


def render(row: Location, registry: ProviderRegistry = REGISTRY) -> dict[str, Any]:
    return {
        "name": row.name,
        "provider": row.provider,
        "config": registry.masked(row.provider, dict(row.config or {})),
        "capacity": row.capacity,
    }


def _state(row: Location) -> dict[str, Any]:
    return {"provider": row.provider, "config": dict(row.config or {}), "capacity": dict(row.capacity or {})}


def _shown(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """An audit entry's view: secret settings masked, like a render."""
    if state is None:
        return None
    return {**state, "config": REGISTRY.masked(state["provider"], state["config"])}
