"""queue_settings in Azure ML's shapes: the SDK's names, the wire's values, defaults and errors."""

from __future__ import annotations

import pytest

from cloudlet.domain.jobs import queue_settings
from cloudlet.domain.jobs.queue_settings import (
    JobTier,
    QueueSettings,
    QueueSettingsError,
    parse_queue_settings,
)


def test_defaults_are_azures_medium_standard() -> None:
    for empty in (None, {}, {"job_tier": None, "priority": None}, {"job_tier": "Null"}):
        assert parse_queue_settings(empty) == QueueSettings(JobTier.STANDARD, 2)


@pytest.mark.parametrize(
    ("given", "tier", "priority"),
    [
        ({"job_tier": "spot", "priority": "low"}, JobTier.SPOT, 1),
        ({"job_tier": "Premium", "priority": "HIGH"}, JobTier.PREMIUM, 3),
        ({"jobTier": "Basic", "priority": 2}, JobTier.BASIC, 2),  # the REST wire's shape
        ({"job_tier": " standard ", "priority": "3"}, JobTier.STANDARD, 3),
    ],
)
def test_sdk_and_wire_spellings_fold(given: dict[str, object], tier: JobTier, priority: int) -> None:
    parsed = parse_queue_settings(given)
    assert (parsed.job_tier, parsed.priority) == (tier, priority)


def test_round_trip_and_spot_flag() -> None:
    parsed = parse_queue_settings({"job_tier": "Spot", "priority": "high"})
    assert parsed.spot and parsed.to_dict() == {"job_tier": "spot", "priority": "high"}
    assert parse_queue_settings(parsed.to_dict()) == parsed
    assert not parse_queue_settings(None).spot


@pytest.mark.parametrize(
    ("given", "names"),
    [
        ({"priority": "urgent"}, ("queue_settings.priority", "low, medium, high")),
        ({"priority": 4}, ("queue_settings.priority", "1, 2, 3")),
        ({"priority": True}, ("queue_settings.priority",)),
        ({"job_tier": "gold"}, ("queue_settings.job_tier", "spot, basic, standard, premium")),
        ({"job_tier": 3}, ("queue_settings.job_tier",)),
        ({"tier": "spot"}, ("queue_settings.tier", "job_tier, priority")),
    ],
)
def test_errors_name_the_field_and_the_allowed_values(
    given: dict[str, object], names: tuple[str, ...]
) -> None:
    with pytest.raises(QueueSettingsError) as caught:
        parse_queue_settings(given)
    for name in names:
        assert name in str(caught.value)


def test_not_a_mapping_and_where() -> None:
    with pytest.raises(QueueSettingsError, match=r"jobs\.train\.queue_settings: give a mapping"):
        parse_queue_settings("high", where="jobs.train.queue_settings")  # type: ignore[arg-type]
    with pytest.raises(QueueSettingsError, match=r"^jobs\.x\.queue_settings\.priority"):
        parse_queue_settings({"priority": "max"}, where="jobs.x.queue_settings")


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (None, {"priority": "medium"}),
        ({}, {"priority": "medium"}),
        ("not a mapping", {"priority": "medium"}),
        ({"priority": "high"}, {"priority": "high"}),
        ({"priority": 1, "job_tier": "Spot"}, {"priority": "low", "job_tier": "spot"}),
        ({"jobTier": "null"}, {"priority": "medium"}),
        ({"priority": "max"}, {"priority": "max"}),  # refused by the parser: shown as stored
    ],
)
def test_shown_as_job_show_has_it(stored: object, expected: dict[str, str]) -> None:
    shown = queue_settings.shown(stored)
    assert shown == expected
    shown["priority"] = "changed"  # each caller gets its own dict (a view adds to it)
    assert queue_settings.shown(stored) == expected
