"""Locations: pools of capacity behind one provider (administrators add and change them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, get_args

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import validation_error
from cloudlet.services import audit
from cloudlet.services.bootstrap import DEFAULT_LOCAL_CAPACITY
from cloudlet.store.schema import Location

ProviderKind = Literal["local"]  # ssh, slurm and kubernetes arrive with their providers
PROVIDER_KINDS: tuple[str, ...] = get_args(ProviderKind)
CAPACITY_FIELDS = ("vcpus", "memory_gb", "gpus", "overcommit")
LOCATION_NAME = re.compile(r"[a-z][a-z0-9-]{0,63}")


def location_target(name: str) -> str:
    return f"/locations/{name}"


def put(
    session: Session, name: str, provider: str, capacity: Mapping[str, float], actor: str
) -> tuple[Location, bool]:
    """Add or change a location. ``capacity`` holds only the fields given: the rest keep their
    values (a new location starts from the local defaults). True when it was created."""
    if not LOCATION_NAME.fullmatch(name):
        raise validation_error(
            "name", "a location name is lower-case letters, digits and '-', starting with a letter (≤ 64)"
        )
    if provider not in PROVIDER_KINDS:
        raise validation_error(
            "provider", f"provider '{provider}' is not available; use one of: {', '.join(PROVIDER_KINDS)}"
        )
    unknown = sorted(set(capacity) - set(CAPACITY_FIELDS))
    if unknown:
        raise validation_error(f"capacity.{unknown[0]}", f"capacity takes {', '.join(CAPACITY_FIELDS)}")
    row = session.get(Location, name)
    created = row is None
    old = None if row is None else {"provider": row.provider, "capacity": dict(row.capacity)}
    if row is None:
        row = Location(name=name, provider=provider, capacity={})
        session.add(row)
    row.provider, row.capacity = provider, {**DEFAULT_LOCAL_CAPACITY, **row.capacity, **capacity}
    new = {"provider": row.provider, "capacity": dict(row.capacity)}
    if new != old:
        audit.record(session, actor, "location.write", location_target(name), {"old": old, "new": new})
    session.flush()
    return row, created


def list_all(session: Session) -> list[Location]:
    return list(session.scalars(select(Location).order_by(Location.name)))


def render(row: Location) -> dict[str, Any]:
    return {"name": row.name, "provider": row.provider, "capacity": row.capacity}
