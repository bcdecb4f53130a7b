"""Job schedules (domain/jobs/job_schedule.py): validation naming the field, fire times, one fire
after downtime (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.domain.jobs.job_schedule import (
    due_fire,
    fired_job_name,
    job_reference,
    next_fire,
    parse_schedule,
    trigger_of,
)

JOB = {"type": "command", "command": "echo hi"}


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def doc(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "nightly",
        "trigger": {"type": "cron", "expression": "0 2 * * *"},
        "create_job": JOB,
        **overrides,
    }


def problem(body: Any) -> CloudletError:
    with pytest.raises(CloudletError) as caught:
        parse_schedule(body)
    return caught.value


def test_a_schedule_document_round_trips_with_defaults() -> None:
    spec = parse_schedule(doc(display_name="Nightly", tags={"team": "vision"}))
    assert spec.is_enabled is True
    assert spec.document() == {
        "name": "nightly",
        "display_name": "Nightly",
        "tags": {"team": "vision"},
        "properties": {},
        "trigger": {"type": "cron", "expression": "0 2 * * *"},
        "create_job": JOB,
        "is_enabled": True,
    }


@pytest.mark.parametrize(
    ("body", "target", "words"),
    [
        (doc(trigger={"type": "cron", "expression": "61 * * * *"}), "trigger.expression", "five fields"),
        (doc(trigger={"type": "hourly"}), "trigger.type", "'cron' or 'recurrence'"),
        (
            doc(trigger={"type": "recurrence", "frequency": "fortnight", "interval": 1}),
            "trigger.frequency",
            "one of",
        ),
        (
            doc(trigger={"type": "cron", "expression": "* * * * *", "time_zone": "Mars"}),
            "trigger.time_zone",
            "IANA",
        ),
        (doc(trigger=None), "trigger", "trigger mapping is required"),
        (doc(create_job="./job.yml"), "create_job", "read by the CLI"),
        (doc(create_job=None), "create_job", "create_job is required"),
        (doc(name="bad name!"), "name", "letters, digits"),
        (doc(is_enabled="yes"), "is_enabled", "true or false"),
        (doc(schedule="x"), "schedule", "unknown field"),
    ],
)
def test_bad_documents_name_the_field_and_the_fix(body: dict[str, Any], target: str, words: str) -> None:
    error = problem(body)
    assert error.status == 400 and error.target == target and words in error.message


def test_an_existing_job_is_referenced_by_name() -> None:
    spec = parse_schedule(doc(create_job="azureml:train-1"))
    assert job_reference(spec.create_job) == "train-1"
    assert job_reference(JOB) is None


def test_cron_in_a_time_zone_fires_at_local_wall_time() -> None:
    trigger = trigger_of({"type": "cron", "expression": "0 2 * * *", "time_zone": "Pacific Standard Time"})
    # 02:00 in Los Angeles in January is 10:00 UTC
    assert next_fire(trigger, utc(2026, 1, 5, 0, 0)) == utc(2026, 1, 5, 10, 0)


def test_start_and_end_times_bound_the_fires() -> None:
    trigger = trigger_of(
        {
            "type": "cron",
            "expression": "0 * * * *",
            "start_time": "2026-03-01T05:30:00",
            "end_time": "2026-03-01T07:00:00",
        }
    )
    assert next_fire(trigger, utc(2026, 1, 1)) == utc(2026, 3, 1, 6, 0)
    assert next_fire(trigger, utc(2026, 3, 1, 6, 0)) == utc(2026, 3, 1, 7, 0)
    assert next_fire(trigger, utc(2026, 3, 1, 7, 0)) is None


@pytest.mark.parametrize(
    ("recurrence", "after", "expected"),
    [
        ({"frequency": "minute", "interval": 15}, utc(2026, 1, 1, 10, 7), utc(2026, 1, 1, 10, 15)),
        ({"frequency": "hour", "interval": 2}, utc(2026, 1, 1, 11, 0), utc(2026, 1, 1, 12, 0)),
        (
            {"frequency": "day", "interval": 1, "schedule": {"hours": [18], "minutes": [30]}},
            utc(2026, 1, 1, 19, 0),
            utc(2026, 1, 2, 18, 30),
        ),
        (  # 2026-01-01 is a Thursday: the next Monday is the 5th
            {
                "frequency": "week",
                "interval": 1,
                "schedule": {"hours": [9], "minutes": [0], "week_days": ["Monday"]},
            },
            utc(2026, 1, 1),
            utc(2026, 1, 5, 9, 0),
        ),
        (
            {
                "frequency": "month",
                "interval": 1,
                "schedule": {"hours": [1], "minutes": [0], "month_days": [15]},
            },
            utc(2026, 1, 20),
            utc(2026, 2, 15, 1, 0),
        ),
    ],
)
def test_recurrence_frequencies(recurrence: dict[str, Any], after: datetime, expected: datetime) -> None:
    assert next_fire(trigger_of({"type": "recurrence", **recurrence}), after) == expected


def test_after_downtime_a_schedule_fires_once_for_the_latest_missed_time() -> None:
    trigger = trigger_of({"type": "cron", "expression": "*/10 * * * *"})
    # down from 10:01 to 10:55: 10:10 … 10:50 were missed; one fire, for 10:50
    assert due_fire(trigger, utc(2026, 1, 1, 10, 0), utc(2026, 1, 1, 10, 55)) == utc(2026, 1, 1, 10, 50)
    # then it moves on: nothing more is due until 11:00
    assert due_fire(trigger, utc(2026, 1, 1, 10, 50), utc(2026, 1, 1, 10, 59)) is None
    assert due_fire(trigger, utc(2026, 1, 1, 10, 50), utc(2026, 1, 1, 11, 0)) == utc(2026, 1, 1, 11, 0)


def test_a_fired_job_is_named_by_its_schedule_and_fire_minute() -> None:
    assert fired_job_name("nightly", utc(2026, 1, 5, 10, 0)) == "nightly-202601051000"
