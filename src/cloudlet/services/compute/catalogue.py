"""The size catalogue in force: the reviewed data file plus administrators' custom sizes."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, event, select
from sqlalchemy.orm import Session

from cloudlet.domain.compute.sizes import Catalogue, CustomSizeSpec, VmSize, load_catalogue, parse_custom_size
from cloudlet.domain.errors import CloudletError, forbidden
from cloudlet.services.access import audit
from cloudlet.services.core import effects
from cloudlet.services.core.context import Caller
from cloudlet.services.core.use_case import use_case
from cloudlet.store.schema import CustomSize

log = logging.getLogger("cloudlet.catalogue")
_cache: dict[tuple[str, ...], Catalogue] = {}
# The catalogue is read on nearly every request (compute views, submissions) and changes only
# when an administrator adds a size: it is read from the store at most this often per process
# (a size added through another replica shows within this long; this process's own at once).
FRESH_FOR_S = 1.0
_latest: tuple[float, Catalogue] | None = None


_CUSTOM = select(CustomSize.name, CustomSize.spec).order_by(CustomSize.name)


def current(session: Session, fresh: bool = False) -> Catalogue:
    """The catalogue in force; FRESH reads the store now (for a change that checks against it)."""
    global _latest
    now = time.monotonic()
    if not fresh and _latest is not None and now - _latest[0] < FRESH_FOR_S:
        return _latest[1]
    rows = session.execute(_CUSTOM).all()
    key = tuple(f"{name}:{sorted(spec.items())}" for name, spec in rows)
    cached = _cache.get(key)
    if cached is None:
        base = load_catalogue()
        cached = base.with_custom_sizes(_stored_sizes(rows)) if rows else base
        _cache.clear()
        _cache[key] = cached
    _latest = (now, cached)
    return cached


def forget() -> None:
    """The next read goes to the store (a size was added here)."""
    global _latest
    _latest = None


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


@use_case
def add_size(session: Session, caller: Caller, spec: CustomSizeSpec) -> VmSize:
    """The use case behind ``POST /sizes`` and the studio's form: an administrator adds a size."""
    if not caller.is_admin:
        raise forbidden(f"'{caller.name}' is not an administrator; adding a size is for administrators")
    return add_custom(session, spec, caller.name)


def add_custom(session: Session, spec: CustomSizeSpec, actor: str) -> VmSize:
    size = spec.to_size()
    current(session, fresh=True).with_custom_sizes([size])  # raises VmSizeExists on a name clash
    stored = spec.model_dump(mode="json")
    session.add(CustomSize(name=size.name, spec=stored))
    audit.record(session, actor, "size.create", size_target(size.name), stored)
    event.listen(session, "after_commit", lambda _session: forget(), once=True)
    effects.demand_changed(session)
    session.commit()
    return size
