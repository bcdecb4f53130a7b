"""Cron and recurrence triggers in Azure's shape, pure: parsed, validated and walked.

Shared by compute instances' start/stop schedules (``compute/instance_schedule.py``) and job
schedules (``jobs/job_schedule.py``); one set of rules::

    {type: cron, expression: "0 18 * * 1-5", start_time, end_time, time_zone}
    {type: recurrence, frequency: minute|hour|day|week|month, interval: 1,
     schedule: {hours: [18], minutes: [0], week_days: [Monday], month_days: [1]},
     start_time, end_time, time_zone}

Times are wall-clock times in ``time_zone`` (IANA names, "UTC", or common Windows names such as
"Pacific Standard Time"); a naive ``start_time``/``end_time`` is read in that zone too. Every
computation returns aware UTC datetimes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from cloudlet.domain.errors import validation_error

FREQUENCIES = ("minute", "hour", "day", "week", "month")
WEEK_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# How far to look for the next/previous occurrence of a day-based recurrence before giving up
# (an entry such as "every 12 months on the 31st of February" never fires).
_HORIZON_DAYS = 366 * 5

WINDOWS_ZONES: dict[str, str] = {
    "UTC": "UTC",
    "Coordinated Universal Time": "UTC",
    "GMT Standard Time": "Europe/London",
    "Greenwich Standard Time": "Atlantic/Reykjavik",
    "W. Europe Standard Time": "Europe/Berlin",
    "Central Europe Standard Time": "Europe/Budapest",
    "Central European Standard Time": "Europe/Warsaw",
    "Romance Standard Time": "Europe/Paris",
    "GTB Standard Time": "Europe/Bucharest",
    "FLE Standard Time": "Europe/Kiev",
    "E. Europe Standard Time": "Europe/Chisinau",
    "Russian Standard Time": "Europe/Moscow",
    "Israel Standard Time": "Asia/Jerusalem",
    "South Africa Standard Time": "Africa/Johannesburg",
    "Arabian Standard Time": "Asia/Dubai",
    "India Standard Time": "Asia/Kolkata",
    "China Standard Time": "Asia/Shanghai",
    "Singapore Standard Time": "Asia/Singapore",
    "Tokyo Standard Time": "Asia/Tokyo",
    "Korea Standard Time": "Asia/Seoul",
    "AUS Eastern Standard Time": "Australia/Sydney",
    "New Zealand Standard Time": "Pacific/Auckland",
    "Eastern Standard Time": "America/New_York",
    "Central Standard Time": "America/Chicago",
    "Mountain Standard Time": "America/Denver",
    "US Mountain Standard Time": "America/Phoenix",
    "Pacific Standard Time": "America/Los_Angeles",
    "Alaskan Standard Time": "America/Anchorage",
    "Hawaiian Standard Time": "Pacific/Honolulu",
    "Atlantic Standard Time": "America/Halifax",
    "E. South America Standard Time": "America/Sao_Paulo",
}


@dataclass(frozen=True)
class Recurrence:
    frequency: str
    interval: int
    hours: tuple[int, ...] = ()
    minutes: tuple[int, ...] = ()
    week_days: tuple[int, ...] = ()  # 0 = Monday
    month_days: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Trigger:
    """One validated trigger: a cron expression or a recurrence, in a zone, between two instants."""

    zone: tzinfo
    zone_name: str
    cron: str | None = None
    recurrence: Recurrence | None = None
    start: datetime | None = None  # aware
    end: datetime | None = None  # aware


# --- parsing / validation -------------------------------------------------------------------------


def resolve_zone(name: str) -> tzinfo:
    """An IANA name, "UTC", or a Windows name from ``WINDOWS_ZONES`` → tzinfo (KeyError if unknown)."""
    iana = WINDOWS_ZONES.get(name, name)
    if iana == "UTC":
        return UTC
    try:
        return ZoneInfo(iana)
    except (ZoneInfoNotFoundError, ValueError):
        raise KeyError(name) from None


def parse_trigger(trigger: Any, at: str) -> Trigger:
    """Validate one trigger mapping; a ``CloudletError`` names the field under ``at`` and the fix."""
    if not isinstance(trigger, Mapping):
        raise validation_error(
            at, "a trigger mapping is required, e.g. {type: cron, expression: '0 * * * *'}"
        )
    zone_name = str(trigger.get("time_zone") or "UTC")
    try:
        zone = resolve_zone(zone_name)
    except KeyError:
        raise validation_error(
            f"{at}.time_zone",
            f"unknown time zone {zone_name!r}; use an IANA name such as 'Europe/Berlin', 'UTC', "
            "or a Windows name such as 'Pacific Standard Time'",
        ) from None
    start = _instant(trigger.get("start_time"), zone, f"{at}.start_time")
    end = _instant(trigger.get("end_time"), zone, f"{at}.end_time")
    if start and end and end <= start:
        raise validation_error(f"{at}.end_time", "end_time must be after start_time")
    kind = trigger.get("type")
    if kind == "cron":
        cron = _cron(trigger.get("expression"), f"{at}.expression")
        return Trigger(zone=zone, zone_name=zone_name, cron=cron, start=start, end=end)
    if kind == "recurrence":
        rec = _recurrence(trigger, at)
        return Trigger(zone=zone, zone_name=zone_name, recurrence=rec, start=start, end=end)
    raise validation_error(f"{at}.type", f"trigger type must be 'cron' or 'recurrence', got {kind!r}")


def _instant(value: Any, zone: tzinfo, field: str) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            raise validation_error(
                field, f"{value!r} is not an ISO 8601 date-time; write e.g. '2024-05-01T08:00:00'"
            ) from None
    return parsed.replace(tzinfo=zone) if parsed.tzinfo is None else parsed


def _cron(expression: Any, field: str) -> str:
    if not isinstance(expression, str) or not expression.strip():
        raise validation_error(field, "a cron trigger needs 'expression', e.g. '0 18 * * 1-5'")
    if len(expression.split()) != 5 or not croniter.is_valid(expression):
        raise validation_error(
            field,
            f"'{expression}' is not a valid cron expression "
            "(five fields: minute hour day month weekday, e.g. '0 18 * * 1-5')",
        )
    return expression


def _recurrence(trigger: Mapping[str, Any], at: str) -> Recurrence:
    frequency = str(trigger.get("frequency") or "").lower()
    if frequency not in FREQUENCIES:
        raise validation_error(
            f"{at}.frequency", f"frequency must be one of {', '.join(FREQUENCIES)}, got {frequency!r}"
        )
    interval = trigger.get("interval")
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise validation_error(f"{at}.interval", f"interval must be a whole number ≥ 1, got {interval!r}")
    pattern = trigger.get("schedule") or {}
    if not isinstance(pattern, Mapping):
        raise validation_error(f"{at}.schedule", "schedule must be a mapping of hours/minutes/week_days")
    if pattern and frequency in ("minute", "hour"):
        raise validation_error(
            f"{at}.schedule",
            f"'schedule' applies to frequency day, week or month; remove it or change frequency "
            f"(got frequency {frequency!r})",
        )
    unknown = set(pattern) - {"hours", "minutes", "week_days", "month_days"}
    if unknown:
        bad = sorted(unknown)[0]
        raise validation_error(
            f"{at}.schedule.{bad}", f"unknown field '{bad}'; use hours, minutes, week_days or month_days"
        )
    return Recurrence(
        frequency=frequency,
        interval=interval,
        hours=_numbers(pattern.get("hours"), 0, 23, f"{at}.schedule.hours"),
        minutes=_numbers(pattern.get("minutes"), 0, 59, f"{at}.schedule.minutes"),
        week_days=_week_days(pattern.get("week_days"), f"{at}.schedule.week_days"),
        month_days=_numbers(pattern.get("month_days"), 1, 31, f"{at}.schedule.month_days"),
    )


def _numbers(values: Any, low: int, high: int, field: str) -> tuple[int, ...]:
    if values is None:
        return ()
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and low <= v <= high for v in values
    ):
        raise validation_error(field, f"must be a list of whole numbers from {low} to {high}, got {values!r}")
    return tuple(sorted(set(values)))


def _week_days(values: Any, field: str) -> tuple[int, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    out: set[int] = set()
    for value in values if isinstance(values, list) else [values]:
        name = str(value).strip().lower()
        matches = [i for i, day in enumerate(WEEK_DAYS) if len(name) >= 3 and day.startswith(name)]
        if len(matches) != 1:
            raise validation_error(
                field, f"{value!r} is not a week day; use Monday, Tuesday, … Sunday (e.g. [Monday, Friday])"
            )
        out.add(matches[0])
    return tuple(sorted(out))


# --- occurrences -----------------------------------------------------------------------------------


def next_occurrence(entry: Trigger, after: datetime) -> datetime | None:
    """The first time strictly after ``after`` at which ``entry`` fires (UTC), or None."""
    after = _aware(after)
    if entry.start and after < entry.start:
        after = entry.start - timedelta(microseconds=1)
    found = next(_forward(entry, after), None)
    if found is None or (entry.end and found > entry.end):
        return None
    return found


def previous_occurrence(entry: Trigger, at_or_before: datetime) -> datetime | None:
    """The last time ≤ ``at_or_before`` at which ``entry`` fired (UTC), or None."""
    at_or_before = _aware(at_or_before)
    if entry.end and at_or_before > entry.end:
        at_or_before = entry.end
    found = next(_backward(entry, at_or_before), None)
    if found is None or (entry.start and found < entry.start):
        return None
    return found


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _to_utc(local: datetime, zone: tzinfo) -> datetime:
    # A wall time that does not exist (DST gap) maps forward by the gap; one that occurs twice
    # (DST fold) is taken at its first occurrence (fold=0), so it fires once.
    return local.replace(tzinfo=zone).astimezone(UTC)


def _forward(entry: Trigger, after: datetime) -> Iterator[datetime]:
    if entry.cron:
        yield from _cron_walk(entry, after, forward=True)
    elif entry.recurrence:
        yield from _recurrence_walk(entry, entry.recurrence, after, forward=True)


def _backward(entry: Trigger, at_or_before: datetime) -> Iterator[datetime]:
    if entry.cron:
        yield from _cron_walk(entry, at_or_before, forward=False)
    elif entry.recurrence:
        yield from _recurrence_walk(entry, entry.recurrence, at_or_before, forward=False)


def _cron_walk(entry: Trigger, bound: datetime, forward: bool) -> Iterator[datetime]:
    # croniter walks naive local wall-clock time, so "0 18 * * *" stays 18:00 across DST changes.
    local = bound.astimezone(entry.zone).replace(tzinfo=None)
    if not forward:
        local += timedelta(seconds=1)  # get_prev is strict; include an occurrence exactly at bound
    walker = croniter(entry.cron, local)
    for _ in range(10_000):
        step = walker.get_next(datetime) if forward else walker.get_prev(datetime)
        at = _to_utc(step, entry.zone)
        if (forward and at > bound) or (not forward and at <= bound):
            yield at
            return


def _recurrence_walk(entry: Trigger, rec: Recurrence, bound: datetime, forward: bool) -> Iterator[datetime]:
    if rec.frequency in ("minute", "hour"):
        yield _fixed_step(entry, rec, bound, forward)
        return
    local_day = bound.astimezone(entry.zone).date()
    step = 1 if forward else -1
    for offset in range(_HORIZON_DAYS):
        day = local_day + timedelta(days=offset * step)
        if not _day_matches(entry, rec, day):
            continue
        times = [_to_utc(datetime.combine(day, t), entry.zone) for t in _times_of_day(entry, rec)]
        hits = [t for t in times if t > bound] if forward else [t for t in times if t <= bound]
        if hits:
            yield min(hits) if forward else max(hits)
            return


def _fixed_step(entry: Trigger, rec: Recurrence, bound: datetime, forward: bool) -> datetime:
    # Every N minutes/hours of elapsed time from start_time (or from midnight UTC 2000-01-01, so
    # "every 15 minutes" lands on :00, :15, :30, :45 when no start_time is given).
    anchor = entry.start or datetime(2000, 1, 1, tzinfo=UTC)
    period = timedelta(minutes=rec.interval) if rec.frequency == "minute" else timedelta(hours=rec.interval)
    count = (bound - anchor) // period
    at = anchor + count * period
    if forward:
        return at + period if at <= bound else at
    return at if at <= bound else at - period


def _anchor(entry: Trigger) -> datetime:
    start = entry.start or datetime(2000, 1, 3, tzinfo=UTC)  # a Monday
    return start.astimezone(entry.zone)


def _day_matches(entry: Trigger, rec: Recurrence, day: date) -> bool:
    anchor = _anchor(entry).date()
    if rec.frequency == "day":
        return (day - anchor).days % rec.interval == 0
    if rec.frequency == "week":
        days = rec.week_days or (anchor.weekday(),)
        weeks = (day - timedelta(days=day.weekday()) - (anchor - timedelta(days=anchor.weekday()))).days // 7
        return day.weekday() in days and weeks % rec.interval == 0
    months = (day.year - anchor.year) * 12 + day.month - anchor.month
    wanted = rec.month_days or (anchor.day,)
    # A day a month lacks (31 in April) is skipped that month, as cron does.
    return day.day in wanted and months % rec.interval == 0


def _times_of_day(entry: Trigger, rec: Recurrence) -> list[time]:
    anchor = _anchor(entry) if entry.start else None
    hours = rec.hours or ((anchor.hour,) if anchor else (0,))
    minutes = rec.minutes or ((anchor.minute,) if anchor else (0,))
    return sorted(time(h, m) for h in hours for m in minutes)
