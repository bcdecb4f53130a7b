"""The size catalogue in force: the reviewed data file plus administrators' custom sizes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.sizes import Catalogue, CustomSizeSpec, VmSize, load_catalogue, parse_custom_size
from cloudlet.services import audit
from cloudlet.store.schema import CustomSize

log = logging.getLogger("cloudlet.catalogue")
_cache: dict[tuple[str, ...], Catalogue] = {}


_CUSTOM = select(CustomSize.name, CustomSize.spec).order_by(CustomSize.name)


def current(session: Session) -> Catalogue:
    rows = session.execute(_CUSTOM).all()
    key = tuple(f"{name}:{sorted(spec.items())}" for name, spec in rows)
    cached = _cache.get(key)
    if cached is None:
        base = load_catalogue()
        cached = base.with_custom_sizes(_stored_sizes(rows)) if rows else base
        _cache.clear()
        _cache[key] = cached
    return cached


def _stored_sizes(rows: Sequence[Row[Any]]) -> list[VmSize]:
    """Stored custom sizes; one that no longer validates (stored before today's bounds) is left
    out with a warning rather than failing every read of the catalogue."""
    sizes = []
    for row in rows:
        try:
            sizes.append(parse_custom_size(row.spec).to_size())
        except CloudletError as exc:
            log.warning("custom size %r is ignored: %s", row.name, exc.message)
    return sizes


def size_target(name: str) -> str:
    return f"/sizes/{name}"


def add_custom(session: Session, spec: CustomSizeSpec, actor: str) -> VmSize:
    size = spec.to_size()
    current(session).with_custom_sizes([size])  # raises VmSizeExists on a name clash
    stored = spec.model_dump(mode="json")
    session.add(CustomSize(name=size.name, spec=stored))
    audit.record(session, actor, "size.create", size_target(size.name), stored)
    session.flush()
    return size
