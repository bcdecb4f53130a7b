"""Time in one place, so services and reconcilers agree on UTC and tests can reason about it."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:  # SQLite drops the zone; every stored time is UTC
        value = value.replace(tzinfo=UTC)
    return value.isoformat().replace("+00:00", "Z")
