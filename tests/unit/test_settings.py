"""``services/core/settings.env_number``: a setting read each pass never stops the pass."""

from __future__ import annotations

import logging

import pytest

from cloudlet.domain.jobs.preemption import Guard
from cloudlet.services.core import settings
from cloudlet.services.jobs import fair_config, fair_queue


@pytest.mark.parametrize("raw", ["abc", "-5", "nan", "inf", ""])
def test_a_bad_or_missing_value_gives_the_default(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("CLOUDLET_TEST_NUMBER", raw)
    assert settings.env_number("CLOUDLET_TEST_NUMBER", 7.0) == 7.0


def test_a_good_value_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDLET_TEST_NUMBER", " 2.5 ")
    assert settings.env_number("CLOUDLET_TEST_NUMBER", 7.0) == 2.5
    monkeypatch.setenv("CLOUDLET_TEST_NUMBER", "0")
    assert settings.env_number("CLOUDLET_TEST_NUMBER", 7.0, minimum=1) == 7.0


def test_a_typo_in_the_guard_is_logged_and_the_defaults_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CLOUDLET_PREEMPT_MIN_RUN_S", "10m")
    monkeypatch.setenv("CLOUDLET_PREEMPT_MAX_PER_HOUR", "5")
    monkeypatch.setenv(fair_config.HALF_LIFE_ENV, "a week")
    with caplog.at_level(logging.WARNING, logger="cloudlet.settings"):
        guard = fair_queue.guard()
        half_life = fair_config.half_life_s()
    assert guard == Guard(min_run_s=Guard().min_run_s, max_per_hour=5, max_per_job=3)
    assert half_life == fair_config.fair_share.SLURM_HALF_LIFE_S
    assert "CLOUDLET_PREEMPT_MIN_RUN_S='10m'" in caplog.text
