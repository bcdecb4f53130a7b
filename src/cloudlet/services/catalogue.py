"""The size catalogue in force: the reviewed data file plus administrators' custom sizes."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.sizes import Catalogue, VmSize, custom_size, load_catalogue
from cloudlet.store.schema import CustomSize

_cache: dict[tuple[str, ...], Catalogue] = {}


_CUSTOM = select(CustomSize.name, CustomSize.spec).order_by(CustomSize.name)


def current(session: Session) -> Catalogue:
    rows = session.execute(_CUSTOM).all()
    key = tuple(f"{name}:{sorted(spec.items())}" for name, spec in rows)
    cached = _cache.get(key)
    if cached is None:
        base = load_catalogue()
        cached = base.with_custom_sizes(_size_from_spec(spec) for _, spec in rows) if rows else base
        _cache.clear()
        _cache[key] = cached
    return cached


_CUSTOM_FIELDS = {
    "name",
    "vcpus",
    "memory_gb",
    "gpus",
    "gpu_model",
    "gpu_architecture",
    "family",
    "temp_disk_gb",
    "price_dedicated",
    "price_low_priority",
}


def add_custom(session: Session, body: dict[str, Any]) -> VmSize:
    unknown = set(body) - _CUSTOM_FIELDS
    if unknown:
        field = sorted(unknown)[0]
        raise CloudletError(
            "ValidationError",
            f"unknown field '{field}' for a custom size; allowed: {', '.join(sorted(_CUSTOM_FIELDS))}",
            field,
        )
    for required in ("name", "vcpus", "memory_gb"):
        if required not in body:
            raise CloudletError("ValidationError", f"'{required}' is required for a custom size", required)
    size = _size_from_spec(body)
    current(session).with_custom_sizes([size])  # raises VmSizeExists on a name clash
    session.add(CustomSize(name=size.name, spec=dict(body)))
    session.flush()
    return size


def _size_from_spec(spec: dict[str, Any]) -> VmSize:
    try:
        return custom_size(**spec)
    except TypeError as exc:
        raise CloudletError("ValidationError", f"invalid custom size: {exc}", "size") from None
