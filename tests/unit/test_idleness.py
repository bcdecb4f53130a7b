"""Idle shutdown decisions and their explanations (pure), and the agent's /proc parsing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from cloudlet.agent.activity import ActivityCollector, count_ssh_sessions
from cloudlet.domain.compute.idleness import (
    ActivityReport,
    KernelActivity,
    TerminalActivity,
    decide_idle,
    report_from_wire,
)

NOW = datetime(2024, 5, 1, 12, 0, 15, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def report(**fields: object) -> ActivityReport:
    return ActivityReport(collected_at=NOW, **fields)  # type: ignore[arg-type]


def test_busy_kernel_names_its_notebook_and_holds_the_instance() -> None:
    busy = KernelActivity("k1", "busy", ago(900), notebook="analysis.ipynb")
    decision = decide_idle(report(kernels=(busy,)), 1, NOW, started_at=ago(3600))
    assert not decision.idle and not decision.should_stop and decision.stops_at is None
    assert decision.explanation == "not idle: kernel busy in analysis.ipynb"


def test_a_kernel_starting_for_long_does_not_hold_the_instance() -> None:
    fresh = KernelActivity("k1", "starting", ago(30), notebook="new.ipynb")
    assert decide_idle(report(kernels=(fresh,)), 1, NOW).reasons == ("kernel starting in new.ipynb",)
    stale = KernelActivity("k1", "starting", ago(600), notebook="new.ipynb")
    assert decide_idle(report(kernels=(stale,)), 1, NOW).should_stop


def test_ssh_sessions_and_jobs_hold_the_instance() -> None:
    decision = decide_idle(report(ssh_sessions=1, running_jobs=("j1",)), 1, NOW)
    assert decision.reasons == ("1 SSH session", "job j1 running")
    assert decide_idle(report(ssh_sessions=2), 1, NOW).reasons == ("2 SSH sessions",)


def test_recent_terminal_activity_restarts_the_count() -> None:
    terminal = TerminalActivity("1", ago(12))
    decision = decide_idle(report(terminals=(terminal,)), 1, NOW, started_at=ago(3600))
    assert decision.idle and not decision.should_stop
    assert decision.idle_since == ago(12)
    assert decision.stops_at == ago(12) + timedelta(minutes=1)
    assert decision.explanation == "idle 12 s of 60 s; stops at 12:01:03 UTC (last: terminal active 12 s ago)"


def test_idle_long_enough_stops() -> None:
    kernel = KernelActivity("k1", "idle", ago(45), notebook="a.ipynb")
    counting = decide_idle(report(kernels=(kernel,)), 1, NOW)
    assert counting.explanation.startswith("idle 45 s of 60 s; stops at 12:00:30 UTC")
    later = decide_idle(report(kernels=(kernel,)), 1, NOW + timedelta(seconds=15))
    assert later.should_stop


def test_untouched_instance_is_idle_from_its_start() -> None:
    decision = decide_idle(report(), 30, NOW, started_at=ago(31 * 60))
    assert decision.should_stop
    assert decision.explanation.startswith("idle 31 min of 30 min")
    assert decide_idle(report(), 30, NOW).idle_since == NOW  # nothing known: counting starts now


def test_seconds_override_and_idle_shutdown_off() -> None:
    assert decide_idle(report(), 60, NOW, started_at=ago(5), timeout_s=3).should_stop
    off = decide_idle(report(last_http_activity=ago(200)), None, NOW)
    assert off.idle and not off.should_stop
    assert off.explanation == "idle; idle shutdown is off (last: browser active 3 min ago)"


def test_disk_full_pauses_idle_shutdown_with_the_reason() -> None:
    decision = decide_idle(report(), 1, NOW, started_at=ago(3600), unusable_reason="OS disk full (100%)")
    assert not decision.should_stop and decision.paused == "OS disk full (100%)"
    assert decision.explanation == "idle shutdown and schedules paused: OS disk full (100%)"
    assert decision.as_dict()["paused"] == "OS disk full (100%)"


def test_report_from_the_agent_wire_format_with_control_plane_facts() -> None:
    wire = {
        "collected_at": "2024-05-01T12:00:15+00:00",
        "kernels": [
            {
                "id": "k1",
                "execution_state": "busy",
                "last_activity": "2024-05-01T12:00:00Z",
                "notebook": "x.ipynb",
            }
        ],
        "terminals": [{"name": "1", "last_activity": "2024-05-01T11:59:00.123Z"}],
        "ssh": {"sessions": 0, "last_activity": None},
    }
    parsed = report_from_wire(wire).with_control_plane(["j2"], ago(1))
    assert parsed.kernels[0].last_activity == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert parsed.terminals[0].last_activity is not None
    assert decide_idle(parsed, 1, NOW).reasons == ("kernel busy in x.ipynb", "job j2 running")


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:5DC0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:5DC0 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 2 1
   2: 0100007F:A1B2 0100007F:5DC0 01 00000000:00000000 00:00000000 00000000     0        0 3 1
   3: 0100007F:5DC0 0100007F:A1B3 06 00000000:00000000 00:00000000 00000000     0        0 4 1
"""


def test_ssh_sessions_are_established_connections_to_the_port(tmp_path: Path) -> None:
    (tmp_path / "tcp").write_text(TCP)  # 0x5DC0 = 24000; one listening, one in, one out, one TIME_WAIT
    assert count_ssh_sessions(24000, tmp_path) == 1
    assert count_ssh_sessions(22, tmp_path) == 0
    collector = ActivityCollector(None, ssh_port=24000, proc_net=tmp_path)
    first = collector.collect(NOW)
    assert first["ssh"] == {"sessions": 1, "last_activity": NOW.isoformat()}
    (tmp_path / "tcp").write_text(TCP.splitlines()[0] + "\n")
    second = collector.collect(NOW + timedelta(seconds=5))
    assert second["ssh"] == {
        "sessions": 0,
        "last_activity": NOW.isoformat(),
    }  # remembers when it last saw one


def test_unreachable_jupyter_is_reported_not_raised() -> None:
    collector = ActivityCollector("http://127.0.0.1:9", timeout_s=0.5)
    out = collector.collect(NOW)
    assert out["jupyter_reachable"] is False and out["kernels"] == []
    assert out["errors"][0].startswith("jupyter:")
