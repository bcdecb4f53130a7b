"""Time in one place, so services and reconcilers agree on UTC and tests can reason about it."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol, overload

from cloudlet.domain.errors import validation_error


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:  # SQLite drops the zone; every stored time is UTC
        value = value.replace(tzinfo=UTC)
    return value.isoformat().replace("+00:00", "Z")


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: None) -> None: ...
@overload
def as_utc(value: datetime | None) -> datetime | None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """A stored time as an aware UTC datetime (SQLite returns them naive; every stored time is UTC)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def given_time(value: datetime, target: str) -> datetime:
    """A caller's time as UTC; one that UTC cannot hold (year 1 east of Greenwich, 9999 west of it)
    is refused naming the field, not left to overflow later."""
    try:
        return as_utc(value)
    except OverflowError:
        raise validation_error(target, f"'{target}' is outside the times this server handles") from None


class Clock(Protocol):
    """Where a reconciler reads the time (epoch seconds): the wall in production, a fake in tests."""

    def now(self) -> float: ...


class WallClock:
    def now(self) -> float:
        return time.time()


WALL_CLOCK: Clock = WallClock()
