"""What the instance watch decides on a tick, and what ``compute show`` says (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from cloudlet.domain.compute.instance_schedule import parse_schedules
from cloudlet.domain.compute.instance_watch import (
    AGENT_LOST,
    DISK_FULL,
    InstanceFacts,
    decide_tick,
    disk_full_reason,
    explain,
    stored_reason,
    without_unusable,
)

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
STOP_AT_NOON = [{"action": "stop", "trigger": {"type": "cron", "expression": "0 12 * * *"}}]
START_AT_NOON = [{"action": "start", "trigger": {"type": "cron", "expression": "0 12 * * *"}}]


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def facts(**fields: Any) -> InstanceFacts:
    base: dict[str, Any] = {"name": "ci1", "state": "Running", "now": NOW, "started_at": ago(30)}
    return InstanceFacts(**{**base, **fields})


def busy_kernel(notebook: str = "analysis.ipynb") -> dict[str, Any]:
    kernel = {
        "id": "k1",
        "execution_state": "busy",
        "last_activity": ago(500).isoformat(),
        "notebook": notebook,
    }
    return {"activity": {"kernels": [kernel]}}


def test_idle_for_the_timeout_stops_once_by_idle_shutdown() -> None:
    verdict = decide_tick(facts(idle_minutes=15, idle_timeout_s=20))
    assert (verdict.operation, verdict.created_by) == ("stop", "idle-shutdown")
    assert decide_tick(facts(idle_minutes=15, idle_timeout_s=60)).operation is None
    assert decide_tick(facts(idle_minutes=None)).operation is None


def test_a_busy_kernel_holds_the_instance_and_show_says_where() -> None:
    held = facts(idle_minutes=15, idle_timeout_s=1, report=busy_kernel())
    assert decide_tick(held).operation is None
    shown = explain(held)
    assert shown["idle_shutdown"]["explanation"] == "not idle: kernel busy in analysis.ipynb"
    assert shown["status_message"] == "not idle: kernel busy in analysis.ipynb"


def test_show_counts_towards_the_stop() -> None:
    shown = explain(facts(idle_minutes=1, last_http=ago(12)))
    assert shown["idle_shutdown"]["explanation"] == (
        "idle 12 s of 60 s; stops at 12:00:48 UTC (last: browser active 12 s ago)"
    )
    assert shown["next_scheduled_action"] is None and shown["unusable_reason"] is None


def test_a_scheduled_stop_fires_in_its_window_only() -> None:
    entries = parse_schedules(STOP_AT_NOON)
    due = decide_tick(facts(schedules=entries, schedule_checked_at=ago(1)))
    assert (due.operation, due.created_by, due.schedule_checked_at) == ("stop", "schedule", NOW)
    assert decide_tick(facts(schedules=entries, schedule_checked_at=NOW)).operation is None
    first = decide_tick(facts(schedules=entries, schedule_checked_at=None))
    assert first.operation is None and first.schedule_checked_at == NOW  # no replay of the past


def test_a_scheduled_start_starts_a_stopped_instance() -> None:
    entries = parse_schedules(START_AT_NOON)
    verdict = decide_tick(facts(state="Stopped", schedules=entries, schedule_checked_at=ago(1)))
    assert (verdict.operation, verdict.created_by) == ("start", "schedule")
    shown = explain(facts(state="Stopped", schedules=entries))
    assert shown["idle_shutdown"] is None
    assert shown["next_scheduled_action"]["at"] == "2024-05-02T12:00:00+00:00"


def test_nothing_is_decided_while_an_operation_runs_and_the_window_waits() -> None:
    entries = parse_schedules(STOP_AT_NOON)
    verdict = decide_tick(facts(schedules=entries, schedule_checked_at=ago(5), operation="restart"))
    assert verdict.operation is None and verdict.schedule_checked_at == ago(5)


def test_a_full_disk_makes_it_unusable_and_pauses_idle_and_schedules() -> None:
    disk = {"used_bytes": 63 << 20, "total_bytes": 64 << 20, "full": True}
    reason = disk_full_reason(disk)
    assert reason == "OS disk full (0.06 of 0.06 GiB used); free space, then restart"
    assert disk_full_reason({**disk, "full": False}) is None
    verdict = decide_tick(facts(disk_full=reason, idle_minutes=15, idle_timeout_s=1))
    assert verdict.unusable == (DISK_FULL, reason) and verdict.operation is None

    errors = [{"code": DISK_FULL, "message": reason}]
    paused = facts(
        state="Unusable",
        unusable_reason=stored_reason("Unusable", errors),
        idle_minutes=15,
        idle_timeout_s=1,
        schedules=parse_schedules(STOP_AT_NOON),
        schedule_checked_at=ago(1),
    )
    verdict = decide_tick(paused)
    assert verdict.operation is None and verdict.schedule_checked_at == NOW  # skipped, not replayed
    shown = explain(paused)
    assert shown["unusable_reason"] == reason
    assert shown["idle_shutdown"]["explanation"] == f"idle shutdown and schedules paused: {reason}"
    assert shown["next_scheduled_action"]["text"].endswith(f"(paused: {reason})")
    assert without_unusable([*errors, {"code": "Other"}]) == [{"code": "Other"}]
    assert stored_reason("Running", errors) is None


def test_an_agent_silent_past_the_threshold_makes_it_unusable() -> None:
    quiet = facts(quiet_s=40.0)
    verdict = decide_tick(quiet)
    assert verdict.unusable is not None and verdict.unusable[0] == AGENT_LOST
    assert "stopped reporting 40 s ago" in verdict.unusable[1]
    assert decide_tick(replace(quiet, quiet_s=3.0)).unusable is None


def test_only_deliberate_proxy_requests_count_as_activity() -> None:
    from cloudlet.services.compute import instance_activity

    name = "ci-note-test"
    instance_activity.note_request(name, "GET", "application/json")  # JupyterLab's polling
    assert instance_activity.last_request(name) is None
    instance_activity.note_request(name, "GET", "text/html,application/xhtml+xml")  # a page load
    seen = instance_activity.last_request(name)
    assert seen is not None
    instance_activity.note_request(name, "PUT")  # saving a file
    instance_activity.note_request(name, websocket=True)  # a kernel or terminal opened
    later = instance_activity.last_request(name)
    assert later is not None and later >= seen
