"""Start/stop schedules of a compute instance (``schedules.compute_start_stop``), pure.

Each entry is Azure's shape::

    action: start | stop
    state: enabled | disabled
    trigger: {type: cron, expression: "0 18 * * 1-5", start_time, end_time, time_zone}
    trigger: {type: recurrence, frequency: minute|hour|day|week|month, interval: 1,
              schedule: {hours: [18], minutes: [0], week_days: [Monday], month_days: [1]},
              start_time, end_time, time_zone}

Times are wall-clock times in ``time_zone`` (IANA names, "UTC", or common Windows names such as
"Pacific Standard Time"); a naive ``start_time``/``end_time`` is read in that zone too. Every
computation returns aware UTC datetimes.

The reconciler keeps one instant per instance, ``last_checked``, and on every tick calls
``due_action(entries, last_checked, now)``: it returns the action whose time fell in
``(last_checked, now]`` (the latest wins when several did) and then stores ``now``. Because the
windows of successive ticks never overlap, each occurrence fires exactly once however often it ticks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.triggers import (
    Recurrence,
    Trigger,
    next_occurrence,
    parse_trigger,
    previous_occurrence,
    resolve_zone,
)

# Re-exported: the trigger rules live in domain/triggers.py, shared with job schedules.
__all__ = ["Recurrence", "next_occurrence", "previous_occurrence", "resolve_zone"]

PREFIX = "schedules.compute_start_stop"
Action = Literal["start", "stop"]


@dataclass(frozen=True, kw_only=True)
class StartStop(Trigger):
    """One validated ``compute_start_stop`` entry: a trigger with an action."""

    index: int
    action: Action
    enabled: bool


@dataclass(frozen=True)
class DueAction:
    action: Action
    at: datetime  # aware UTC: the occurrence that fell due
    index: int  # which entry of compute_start_stop

    def describe(self) -> str:
        return f"{self.action} at {self.at:%Y-%m-%d %H:%M:%S} UTC ({PREFIX}[{self.index}])"


# --- parsing / validation -------------------------------------------------------------------------


def parse_schedules(entries: Any, prefix: str = PREFIX) -> list[StartStop]:
    """Validate ``compute_start_stop`` (a list of mappings, e.g. from YAML or ``model_dump()``).

    Raises ``CloudletError`` whose target is the offending field, e.g.
    ``schedules.compute_start_stop[0].trigger.expression``, and whose message says how to fix it.
    """
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise validation_error(prefix, "must be a list of {action, state, trigger} entries")
    return [_parse_entry(entry, f"{prefix}[{i}]", i) for i, entry in enumerate(entries)]


def _parse_entry(entry: Any, where: str, index: int) -> StartStop:
    if not isinstance(entry, Mapping):
        raise validation_error(where, "each entry must be a mapping with 'action' and 'trigger'")
    action = entry.get("action")
    if action not in ("start", "stop"):
        raise validation_error(f"{where}.action", f"action must be 'start' or 'stop', got {action!r}")
    state = entry.get("state") or "enabled"
    if state not in ("enabled", "disabled"):
        raise validation_error(f"{where}.state", f"state must be 'enabled' or 'disabled', got {state!r}")
    trigger = parse_trigger(entry.get("trigger"), f"{where}.trigger")
    return StartStop(
        index=index,
        action=action,
        enabled=state == "enabled",
        zone=trigger.zone,
        zone_name=trigger.zone_name,
        cron=trigger.cron,
        recurrence=trigger.recurrence,
        start=trigger.start,
        end=trigger.end,
    )


# --- due actions ---------------------------------------------------------------------------------


def next_action(entries: Sequence[StartStop], after: datetime) -> DueAction | None:
    """The next enabled action after ``after`` (for ``compute show``: "next: stop at …")."""
    best: DueAction | None = None
    for entry in entries:
        if not entry.enabled:
            continue
        at = next_occurrence(entry, after)
        if at is not None and (best is None or at < best.at):
            best = DueAction(entry.action, at, entry.index)
    return best


def due_actions(
    entries: Sequence[StartStop], last_checked: datetime | None, now: datetime
) -> list[DueAction]:
    """For each enabled entry, its latest occurrence in ``(last_checked, now]``, oldest first.

    ``last_checked=None`` (never checked) yields nothing: a new instance does not replay the past.
    """
    if last_checked is None:
        return []
    last_checked, now = _aware(last_checked), _aware(now)
    due: list[DueAction] = []
    for entry in entries:
        if not entry.enabled:
            continue
        at = previous_occurrence(entry, now)
        if at is not None and at > last_checked:
            due.append(DueAction(entry.action, at, entry.index))
    # Same instant: the later entry in the list wins, as it is applied last.
    return sorted(due, key=lambda d: (d.at, d.index))


def due_action(
    entries: Sequence[StartStop],
    last_checked: datetime | None,
    now: datetime,
    paused: str | None = None,
) -> DueAction | None:
    """The action to apply now (latest wins), or None. ``paused`` (e.g. "OS disk full") skips it:
    the caller still stores ``now`` as ``last_checked``, so a paused action is not replayed later."""
    if paused:
        return None
    due = due_actions(entries, last_checked, now)
    return due[-1] if due else None


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def schedule_problem(entries: Any) -> CloudletError | None:
    """The first problem of ``compute_start_stop`` as an error, or None (for callers that collect)."""
    try:
        parse_schedules(entries)
    except CloudletError as exc:
        return exc
    return None
