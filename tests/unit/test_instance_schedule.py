"""Start/stop schedules of compute instances: next occurrence, due actions, validation (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cloudlet.domain.compute.compute_spec import parse_compute
from cloudlet.domain.compute.instance_schedule import (
    DueAction,
    StartStop,
    due_action,
    due_actions,
    next_action,
    next_occurrence,
    parse_schedules,
    previous_occurrence,
    resolve_zone,
)
from cloudlet.domain.errors import CloudletError


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def cron(expression: str, action: str = "stop", **trigger: Any) -> dict[str, Any]:
    return {"action": action, "trigger": {"type": "cron", "expression": expression, **trigger}}


def recurrence(frequency: str, interval: int = 1, action: str = "stop", **trigger: Any) -> dict[str, Any]:
    body = {"type": "recurrence", "frequency": frequency, "interval": interval, **trigger}
    return {"action": action, "trigger": body}


def one(entry: dict[str, Any]) -> StartStop:
    return parse_schedules([entry])[0]


def problem(entries: Any) -> CloudletError:
    with pytest.raises(CloudletError) as info:
        parse_schedules(entries)
    return info.value


# --- cron -------------------------------------------------------------------------------------------


def test_cron_weekdays_at_six_utc() -> None:
    entry = one(cron("0 18 * * 1-5"))
    friday_noon = utc(2024, 5, 3, 12, 0)
    assert next_occurrence(entry, friday_noon) == utc(2024, 5, 3, 18, 0)
    # Friday 18:00 itself is not "after" 18:00; the next is Monday.
    assert next_occurrence(entry, utc(2024, 5, 3, 18, 0)) == utc(2024, 5, 6, 18, 0)
    assert previous_occurrence(entry, utc(2024, 5, 3, 18, 0)) == utc(2024, 5, 3, 18, 0)
    assert previous_occurrence(entry, utc(2024, 5, 5, 9, 0)) == utc(2024, 5, 3, 18, 0)


def test_cron_in_a_time_zone_follows_daylight_saving() -> None:
    entry = one(cron("0 18 * * *", time_zone="Europe/Berlin"))
    # Winter: Berlin is UTC+1; summer: UTC+2. 18:00 local either way.
    assert next_occurrence(entry, utc(2024, 1, 10, 0, 0)) == utc(2024, 1, 10, 17, 0)
    assert next_occurrence(entry, utc(2024, 7, 10, 0, 0)) == utc(2024, 7, 10, 16, 0)
    # Across the spring change (31 March 2024).
    assert next_occurrence(entry, utc(2024, 3, 30, 17, 30)) == utc(2024, 3, 31, 16, 0)


def test_windows_zone_name() -> None:
    entry = one(cron("0 9 * * *", time_zone="Pacific Standard Time"))
    assert next_occurrence(entry, utc(2024, 1, 10, 0, 0)) == utc(2024, 1, 10, 17, 0)  # PST = UTC-8
    assert resolve_zone("UTC") is UTC


def test_ambiguous_local_time_fires_once() -> None:
    # 02:30 happens twice in Berlin on 27 Oct 2024; the schedule fires at the first one only.
    entry = one(cron("30 2 * * *", time_zone="Europe/Berlin"))
    first = next_occurrence(entry, utc(2024, 10, 26, 12, 0))
    assert first == utc(2024, 10, 27, 0, 30)
    assert next_occurrence(entry, first) == utc(2024, 10, 28, 1, 30)


def test_start_and_end_time_bound_the_entry() -> None:
    entry = one(cron("0 * * * *", start_time="2024-05-01T10:30:00", end_time="2024-05-01T13:00:00"))
    assert next_occurrence(entry, utc(2024, 4, 1)) == utc(2024, 5, 1, 11, 0)
    assert next_occurrence(entry, utc(2024, 5, 1, 13, 0)) is None
    assert previous_occurrence(entry, utc(2024, 6, 1)) == utc(2024, 5, 1, 13, 0)
    assert previous_occurrence(entry, utc(2024, 5, 1, 10, 59)) is None


def test_naive_start_time_is_in_the_entry_zone() -> None:
    entry = one(cron("0 * * * *", start_time="2024-05-01T10:30:00", time_zone="America/New_York"))
    assert next_occurrence(entry, utc(2024, 4, 1)) == utc(2024, 5, 1, 15, 0)  # 11:00 EDT


# --- recurrence --------------------------------------------------------------------------------------


def test_recurrence_daily_at_hours_and_minutes() -> None:
    entry = one(recurrence("day", schedule={"hours": [8, 18], "minutes": [0, 30]}))
    assert next_occurrence(entry, utc(2024, 5, 1, 8, 10)) == utc(2024, 5, 1, 8, 30)
    assert next_occurrence(entry, utc(2024, 5, 1, 18, 30)) == utc(2024, 5, 2, 8, 0)
    assert previous_occurrence(entry, utc(2024, 5, 2, 7, 0)) == utc(2024, 5, 1, 18, 30)


def test_recurrence_every_other_day_from_start_time() -> None:
    entry = one(recurrence("day", 2, start_time="2024-05-01T09:15:00"))
    assert next_occurrence(entry, utc(2024, 5, 1, 10)) == utc(2024, 5, 3, 9, 15)
    assert next_occurrence(entry, utc(2024, 4, 1)) == utc(2024, 5, 1, 9, 15)


def test_recurrence_weekly_on_week_days_in_a_zone() -> None:
    entry = one(
        recurrence(
            "week",
            schedule={"week_days": ["Monday", "Friday"], "hours": [19], "minutes": [0]},
            time_zone="Asia/Tokyo",
        )
    )
    # Wednesday 1 May 2024 → Friday 3 May 19:00 JST = 10:00 UTC.
    assert next_occurrence(entry, utc(2024, 5, 1)) == utc(2024, 5, 3, 10, 0)
    assert next_occurrence(entry, utc(2024, 5, 3, 10, 0)) == utc(2024, 5, 6, 10, 0)


def test_recurrence_every_two_weeks() -> None:
    start = "2024-05-06T08:00:00"  # a Monday
    entry = one(recurrence("week", 2, start_time=start, schedule={"week_days": ["Monday"]}))
    assert next_occurrence(entry, utc(2024, 5, 6, 9)) == utc(2024, 5, 20, 8, 0)


def test_recurrence_monthly_skips_short_months() -> None:
    entry = one(recurrence("month", schedule={"month_days": [31], "hours": [6]}))
    assert next_occurrence(entry, utc(2024, 4, 1)) == utc(2024, 5, 31, 6, 0)


def test_recurrence_minutes_and_hours_are_elapsed_time() -> None:
    every_15 = one(recurrence("minute", 15))
    assert next_occurrence(every_15, utc(2024, 5, 1, 10, 7)) == utc(2024, 5, 1, 10, 15)
    assert next_occurrence(every_15, utc(2024, 5, 1, 10, 15)) == utc(2024, 5, 1, 10, 30)
    assert previous_occurrence(every_15, utc(2024, 5, 1, 10, 15)) == utc(2024, 5, 1, 10, 15)
    every_3h = one(recurrence("hour", 3, start_time="2024-05-01T01:00:00"))
    assert next_occurrence(every_3h, utc(2024, 5, 1, 2)) == utc(2024, 5, 1, 4, 0)
    assert previous_occurrence(every_3h, utc(2024, 5, 1, 0, 59)) is None


# --- due actions with an injected clock ----------------------------------------------------------------


def test_ticking_fires_each_occurrence_exactly_once() -> None:
    entries = parse_schedules([cron("*/5 * * * *")])
    clock, last = utc(2024, 5, 1, 10, 0, 1), utc(2024, 5, 1, 10, 0, 1)
    fired: list[DueAction] = []
    while clock < utc(2024, 5, 1, 10, 30):
        clock += timedelta(seconds=7)
        action = due_action(entries, last, clock)
        last = clock
        if action:
            fired.append(action)
    assert [a.at for a in fired] == [utc(2024, 5, 1, 10, m) for m in (5, 10, 15, 20, 25, 30)]
    assert all(a.action == "stop" and a.index == 0 for a in fired)


def test_latest_action_wins_after_a_long_gap() -> None:
    entries = parse_schedules([cron("0 8 * * *", action="start"), cron("0 18 * * *", action="stop")])
    due = due_actions(entries, utc(2024, 5, 1, 7), utc(2024, 5, 3, 9))
    assert [(d.action, d.at) for d in due] == [("stop", utc(2024, 5, 2, 18)), ("start", utc(2024, 5, 3, 8))]
    winner = due_action(entries, utc(2024, 5, 1, 7), utc(2024, 5, 3, 9))
    assert winner is not None and winner.action == "start"
    assert "start at 2024-05-03 08:00:00 UTC" in winner.describe()


def test_same_instant_later_entry_wins() -> None:
    entries = parse_schedules([cron("0 18 * * *", action="start"), cron("0 18 * * *", action="stop")])
    winner = due_action(entries, utc(2024, 5, 1, 17), utc(2024, 5, 1, 18))
    assert winner is not None and (winner.action, winner.index) == ("stop", 1)


def test_nothing_due_without_a_previous_check_or_when_disabled_or_paused() -> None:
    entries = parse_schedules([cron("* * * * *")])
    assert due_actions(entries, None, utc(2024, 5, 1)) == []
    disabled = parse_schedules([{**cron("* * * * *"), "state": "disabled"}])
    assert due_actions(disabled, utc(2024, 5, 1), utc(2024, 5, 2)) == []
    assert due_action(entries, utc(2024, 5, 1), utc(2024, 5, 2), paused="OS disk full") is None


def test_next_action_picks_the_soonest_enabled_entry() -> None:
    entries = parse_schedules(
        [cron("0 18 * * *"), cron("0 8 * * *", action="start"), {**cron("0 12 * * *"), "state": "disabled"}]
    )
    upcoming = next_action(entries, utc(2024, 5, 1, 10))
    assert upcoming is not None and (upcoming.action, upcoming.at) == ("stop", utc(2024, 5, 1, 18))
    assert next_action([], utc(2024, 5, 1)) is None


# --- validation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "target", "fix"),
    [
        (cron("nope"), "trigger.expression", "e.g. '0 18 * * 1-5'"),
        (cron("0 0 0 * * *"), "trigger.expression", "five fields"),
        ({"action": "stop", "trigger": {"type": "cron"}}, "trigger.expression", "needs 'expression'"),
        (cron("0 18 * * *", time_zone="Mars/Olympus"), "trigger.time_zone", "IANA name"),
        (cron("0 18 * * *", start_time="tomorrow"), "trigger.start_time", "'2024-05-01T08:00:00'"),
        (
            cron("0 18 * * *", start_time="2024-05-02T00:00", end_time="2024-05-01T00:00"),
            "trigger.end_time",
            "after start_time",
        ),
        ({"action": "pause", "trigger": {}}, "action", "'start' or 'stop'"),
        ({**cron("* * * * *"), "state": "on"}, "state", "'enabled' or 'disabled'"),
        ({"action": "stop", "trigger": {"type": "at"}}, "trigger.type", "'cron' or 'recurrence'"),
        (recurrence("fortnight"), "trigger.frequency", "minute, hour, day, week, month"),
        (recurrence("day", 0), "trigger.interval", "≥ 1"),
        (recurrence("day", schedule={"hours": [24]}), "trigger.schedule.hours", "0 to 23"),
        (recurrence("day", schedule={"minutes": [-1]}), "trigger.schedule.minutes", "0 to 59"),
        (recurrence("week", schedule={"week_days": ["Funday"]}), "trigger.schedule.week_days", "Monday"),
        (recurrence("week", schedule={"days": [1]}), "trigger.schedule.days", "unknown field"),
        (recurrence("hour", schedule={"hours": [1]}), "trigger.schedule", "remove it"),
    ],
)
def test_validation_names_the_field_and_the_fix(entry: dict[str, Any], target: str, fix: str) -> None:
    error = problem([cron("0 1 * * *"), entry])
    assert error.target == f"schedules.compute_start_stop[1].{target}"
    assert fix in error.message


def test_week_day_abbreviations() -> None:
    entry = one(recurrence("week", schedule={"week_days": ["mon", "Fri"]}))
    assert entry.recurrence is not None and entry.recurrence.week_days == (0, 4)


def test_compute_spec_refuses_a_bad_time_zone_naming_the_field() -> None:
    doc = {
        "name": "ci1",
        "type": "computeinstance",
        "size": "Standard_DS3_v2",
        "schedules": {"compute_start_stop": [cron("0 18 * * *", time_zone="Nowhere/Land")]},
    }
    with pytest.raises(CloudletError) as info:
        parse_compute(doc)
    assert info.value.target == "schedules.compute_start_stop[0].trigger.time_zone"
    assert "unknown time zone 'Nowhere/Land'" in info.value.message
    doc["schedules"] = {"compute_start_stop": [cron("0 18 * * *", time_zone="W. Europe Standard Time")]}
    assert parse_compute(doc).schedules is not None
