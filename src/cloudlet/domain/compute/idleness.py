"""Idle shutdown of compute instances, decided and explained (pure).

An instance is *idle* when nothing is happening on it: no kernel executing, no SSH session open,
no job running, and no kernel, terminal, SSH or proxied HTTP activity since some instant
(``idle_since``). It stops when it has been idle for ``idle_time_before_shutdown_minutes``.
Activity (a kernel message, terminal input or output, an HTTP request through the proxy) restarts
the count; a busy kernel, an open SSH session or a running job hold it at zero.

An Unusable instance (OS disk full) pauses idle shutdown and schedules: nothing is stopped
automatically until space is freed and it is restarted, and the explanation says so.

The agent reports what it sees as a JSON mapping (``cloudlet.agent.activity``); the control plane
adds running jobs and the proxy's last request, then calls ``decide_idle``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

STARTING_GRACE = timedelta(minutes=2)


@dataclass(frozen=True)
class KernelActivity:
    kernel_id: str
    execution_state: str  # idle | busy | starting | dead | …
    last_activity: datetime | None = None
    notebook: str | None = None  # path of the session's notebook, when the kernel has one
    name: str | None = None  # kernel spec, e.g. python3


@dataclass(frozen=True)
class TerminalActivity:
    name: str
    last_activity: datetime | None = None


@dataclass(frozen=True)
class ActivityReport:
    """What is happening on an instance at ``collected_at``."""

    collected_at: datetime
    kernels: tuple[KernelActivity, ...] = ()
    terminals: tuple[TerminalActivity, ...] = ()
    ssh_sessions: int = 0
    ssh_last_activity: datetime | None = None
    running_jobs: tuple[str, ...] = ()
    last_http_activity: datetime | None = None  # the owner's last request through the proxy
    jupyter_reachable: bool = True
    errors: tuple[str, ...] = ()

    def with_control_plane(
        self, running_jobs: Sequence[str], last_http_activity: datetime | None
    ) -> ActivityReport:
        """The agent's report plus what only the control plane knows."""
        return replace(self, running_jobs=tuple(running_jobs), last_http_activity=last_http_activity)


@dataclass(frozen=True)
class IdleDecision:
    idle: bool  # nothing holds the instance busy right now
    should_stop: bool  # idle for at least the timeout, and not paused
    idle_since: datetime | None
    stops_at: datetime | None  # when it will stop if nothing happens (None: not counting)
    paused: str | None  # why idle shutdown is paused (e.g. the OS disk is full)
    reasons: tuple[str, ...] = field(default=())  # why it is not idle, or its latest activity
    explanation: str = ""  # one line for ``compute show``

    def as_dict(self) -> dict[str, Any]:
        return {
            "idle": self.idle,
            "should_stop": self.should_stop,
            "idle_since": _iso(self.idle_since),
            "stops_at": _iso(self.stops_at),
            "paused": self.paused,
            "reasons": list(self.reasons),
            "explanation": self.explanation,
        }


def decide_idle(
    report: ActivityReport,
    idle_time_before_shutdown_minutes: float | None,
    now: datetime,
    *,
    started_at: datetime | None = None,
    timeout_s: float | None = None,
    unusable_reason: str | None = None,
) -> IdleDecision:
    """Whether the instance is idle, whether it should stop now, when, and why — in words.

    ``started_at``: when the instance became Running (an instance nobody touched since is idle
    from then). ``timeout_s`` overrides the minutes (tests and the fast-idle setting).
    ``unusable_reason`` (e.g. "OS disk full") pauses idle shutdown.
    """
    now = _aware(now)
    timeout = _timeout(idle_time_before_shutdown_minutes, timeout_s)
    blockers = _blockers(report, now)
    idle_since = _idle_since(report, started_at)
    latest = _latest_activity(report, now)
    if unusable_reason:
        text = f"idle shutdown and schedules paused: {unusable_reason}"
        return IdleDecision(not blockers, False, idle_since, None, unusable_reason, tuple(blockers), text)
    if blockers:
        text = "not idle: " + ", ".join(blockers)
        return IdleDecision(False, False, None, None, None, tuple(blockers), text)
    reasons = (latest,) if latest else ()
    if timeout is None:
        text = "idle; idle shutdown is off" + (f" (last: {latest})" if latest else "")
        return IdleDecision(True, False, idle_since, None, None, reasons, text)
    return _counting(idle_since, timeout, now, reasons)


def _counting(
    idle_since: datetime | None, timeout: timedelta, now: datetime, reasons: tuple[str, ...]
) -> IdleDecision:
    since = idle_since or now
    idle_for = max(timedelta(0), now - since)
    stops_at = since + timeout
    text = f"idle {_span(idle_for)} of {_span(timeout)}; stops at {stops_at:%H:%M:%S} UTC"
    if stops_at.date() != now.date():
        text = f"idle {_span(idle_for)} of {_span(timeout)}; stops at {stops_at:%Y-%m-%d %H:%M:%S} UTC"
    if reasons:
        text += f" (last: {reasons[0]})"
    return IdleDecision(True, idle_for >= timeout, since, stops_at, None, reasons, text)


def _timeout(minutes: float | None, seconds: float | None) -> timedelta | None:
    if seconds is not None:
        return timedelta(seconds=seconds)
    return None if minutes is None else timedelta(minutes=minutes)


def _blockers(report: ActivityReport, now: datetime) -> list[str]:
    out: list[str] = []
    for kernel in report.kernels:
        if _holds(kernel, now):
            where = kernel.notebook or f"kernel {kernel.kernel_id[:8]}"
            out.append(f"kernel {kernel.execution_state} in {where}")
    if report.ssh_sessions:
        out.append(f"{report.ssh_sessions} SSH session{'s' if report.ssh_sessions != 1 else ''}")
    out.extend(f"job {job} running" for job in report.running_jobs)
    return out


def _holds(kernel: KernelActivity, now: datetime) -> bool:
    if kernel.execution_state == "busy":
        return True
    # Jupyter reports "starting" until a client first connects to the kernel; a kernel made through
    # the REST API and never opened would otherwise hold the instance forever.
    if kernel.execution_state == "starting" and kernel.last_activity is not None:
        return now - _aware(kernel.last_activity) < STARTING_GRACE
    return False


def _activity_times(report: ActivityReport) -> list[tuple[datetime, str]]:
    times: list[tuple[datetime, str]] = []
    for kernel in report.kernels:
        if kernel.last_activity:
            times.append((_aware(kernel.last_activity), f"kernel active in {kernel.notebook or 'a kernel'}"))
    for terminal in report.terminals:
        if terminal.last_activity:
            times.append((_aware(terminal.last_activity), "terminal active"))
    if report.ssh_last_activity:
        times.append((_aware(report.ssh_last_activity), "SSH active"))
    if report.last_http_activity:
        times.append((_aware(report.last_http_activity), "browser active"))
    return times


def _idle_since(report: ActivityReport, started_at: datetime | None) -> datetime | None:
    candidates = [t for t, _ in _activity_times(report)]
    if started_at is not None:
        candidates.append(_aware(started_at))
    return max(candidates) if candidates else None


def _latest_activity(report: ActivityReport, now: datetime) -> str | None:
    times = _activity_times(report)
    if not times:
        return None
    at, what = max(times, key=lambda item: item[0])
    return f"{what} {_span(max(timedelta(0), now - at))} ago"


def _span(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# --- the agent's wire format (cloudlet.agent.activity.collect → JSON → here) -------------------------


def _when(value: Any) -> datetime | None:
    if not value:
        return None
    return _aware(datetime.fromisoformat(str(value)))


def report_from_wire(doc: Mapping[str, Any]) -> ActivityReport:
    """The agent's JSON activity report → ``ActivityReport`` (unknown keys ignored)."""
    kernels = tuple(
        KernelActivity(
            kernel_id=str(k.get("id", "")),
            execution_state=str(k.get("execution_state", "unknown")),
            last_activity=_when(k.get("last_activity")),
            notebook=k.get("notebook"),
            name=k.get("name"),
        )
        for k in doc.get("kernels", [])
    )
    terminals = tuple(
        TerminalActivity(str(t.get("name", "")), _when(t.get("last_activity")))
        for t in doc.get("terminals", [])
    )
    ssh = doc.get("ssh") or {}
    return ActivityReport(
        collected_at=_when(doc.get("collected_at")) or datetime.now(UTC),
        kernels=kernels,
        terminals=terminals,
        ssh_sessions=int(ssh.get("sessions", 0)),
        ssh_last_activity=_when(ssh.get("last_activity")),
        jupyter_reachable=bool(doc.get("jupyter_reachable", True)),
        errors=tuple(str(e) for e in doc.get("errors", [])),
    )
