"""What the instance watch does to one compute instance on a tick, and how ``compute show``
explains it (pure).

Every tick the control plane gathers an instance's stored facts (its state, its node's report and
heartbeat, running jobs, the proxy's last request, ``schedule_checked_at``) into ``InstanceFacts``
and calls ``decide_tick``. The verdict says at most one thing to do:

- **Unusable**: the OS disk is full (the agent's ``disk`` report), or the instance's agent has
  stopped reporting (``AGENT_LOST_AFTER_S``). The reason is kept on the compute and shown.
- **stop** (``idle-shutdown``): idle for the configured time (``cloudlet.domain.compute.idleness``);
- **stop / start** (``schedule``): an occurrence of ``schedules.compute_start_stop`` fell in
  ``(schedule_checked_at, now]`` (``cloudlet.domain.compute.instance_schedule``).

Unusable pauses both. While an operation is in progress nothing is decided and
``schedule_checked_at`` is not advanced, so a scheduled action that falls during a restart fires
once it ends instead of being lost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cloudlet.domain.compute.idleness import IdleDecision, decide_idle, report_from_wire
from cloudlet.domain.compute.instance_schedule import DueAction, StartStop, due_action, next_action
from cloudlet.domain.compute.lifecycle import InstanceState
from cloudlet.domain.compute.nodes import LOST_AFTER_S

AGENT_LOST_AFTER_S = LOST_AFTER_S  # as for cluster nodes
DISK_FULL = "DiskFull"
AGENT_LOST = "InstanceAgentLost"
UNUSABLE_CODES = (DISK_FULL, AGENT_LOST)
GIB = 1024**3


@dataclass(frozen=True)
class InstanceFacts:
    name: str
    state: str  # InstanceState value
    now: datetime  # aware
    idle_minutes: float | None = None
    schedules: Sequence[StartStop] = ()
    started_at: datetime | None = None  # when its current node registered
    report: Mapping[str, Any] = field(default_factory=dict)  # the node's report (Node.report)
    running_jobs: tuple[str, ...] = ()
    last_http: datetime | None = None  # the owner's last request through the proxy
    schedule_checked_at: datetime | None = None
    unusable_reason: str | None = None  # stored reason, while Unusable
    operation: str | None = None  # kind of the operation in progress, if any
    quiet_s: float | None = None  # seconds since the node's agent was last heard (None: no node)
    disk_full: str | None = None  # reason, when the OS disk is full
    idle_timeout_s: float | None = None  # overrides idle_minutes (tests, fast idle)


@dataclass(frozen=True)
class TickVerdict:
    schedule_checked_at: datetime | None  # what to store (None: leave as is)
    operation: str | None = None  # "stop" | "start"
    created_by: str | None = None  # "idle-shutdown" | "schedule"
    unusable: tuple[str, str] | None = None  # (code, reason): move the instance to Unusable
    why: str = ""


def disk_full_reason(disk: Mapping[str, Any] | None) -> str | None:
    """The agent's ``disk`` report → the Unusable reason, or None while there is room."""
    if not disk or not disk.get("full"):
        return None
    used, total = float(disk.get("used_bytes") or 0), float(disk.get("total_bytes") or 0)
    if total <= 0:
        return "OS disk full; free space, then restart"
    return f"OS disk full ({used / GIB:.2f} of {total / GIB:.2f} GiB used); free space, then restart"


def idle_decision(facts: InstanceFacts) -> IdleDecision:
    activity = report_from_wire(facts.report.get("activity") or {})
    activity = activity.with_control_plane(facts.running_jobs, facts.last_http)
    return decide_idle(
        activity,
        facts.idle_minutes,
        facts.now,
        started_at=facts.started_at,
        timeout_s=facts.idle_timeout_s,
        unusable_reason=facts.unusable_reason,
    )


def decide_tick(facts: InstanceFacts) -> TickVerdict:
    now, checked = facts.now, facts.schedule_checked_at
    if facts.operation is not None:
        return TickVerdict(checked or now, why=f"{facts.operation} in progress")
    if facts.state == InstanceState.RUNNING:
        return _running(facts)
    if facts.state == InstanceState.UNUSABLE:
        # Paused: nothing fires, and the window still advances (paused actions are skipped).
        return TickVerdict(now, why=f"paused: {facts.unusable_reason}")
    due = due_action(facts.schedules, checked, now)
    if facts.state == InstanceState.STOPPED and due is not None and due.action == "start":
        return TickVerdict(now, "start", "schedule", why=due.describe())
    return TickVerdict(now)


def _running(facts: InstanceFacts) -> TickVerdict:
    now = facts.now
    if facts.disk_full:
        return TickVerdict(now, unusable=(DISK_FULL, facts.disk_full), why=facts.disk_full)
    if facts.quiet_s is not None and facts.quiet_s > AGENT_LOST_AFTER_S:
        reason = (
            f"the instance's agent stopped reporting {facts.quiet_s:.0f} s ago (its machine or agent "
            "died); restart the instance"
        )
        return TickVerdict(now, unusable=(AGENT_LOST, reason), why=reason)
    due = due_action(facts.schedules, facts.schedule_checked_at, now)
    if due is not None and due.action == "stop":
        return TickVerdict(now, "stop", "schedule", why=due.describe())
    idle = idle_decision(facts)
    if idle.should_stop:
        return TickVerdict(now, "stop", "idle-shutdown", why=idle.explanation)
    return TickVerdict(now)


def explain(facts: InstanceFacts) -> dict[str, Any]:
    """``compute show``'s view: why it is (not) idle and when it stops, the next scheduled action,
    and why it is Unusable."""
    out: dict[str, Any] = {"idle_shutdown": None, "next_scheduled_action": None, "unusable_reason": None}
    if facts.state == InstanceState.UNUSABLE:
        out["unusable_reason"] = facts.unusable_reason
    if facts.state in (InstanceState.RUNNING, InstanceState.UNUSABLE):
        out["idle_shutdown"] = idle_decision(facts).as_dict()
    upcoming = next_action(facts.schedules, facts.now) if facts.schedules else None
    if upcoming is not None:
        out["next_scheduled_action"] = _upcoming(upcoming, facts.unusable_reason)
    lines = [out["idle_shutdown"]["explanation"]] if out["idle_shutdown"] else []
    if upcoming is not None:
        lines.append("next: " + out["next_scheduled_action"]["text"])
    out["status_message"] = "; ".join(lines) or None
    return out


def _upcoming(due: DueAction, paused: str | None) -> dict[str, Any]:
    text = due.describe() + (f" (paused: {paused})" if paused else "")
    return {"action": due.action, "at": due.at.astimezone(UTC).isoformat(), "entry": due.index, "text": text}


def stored_reason(state: str | None, errors: Sequence[Any]) -> str | None:
    """The Unusable reason kept in the compute's errors, while it is Unusable."""
    if state != InstanceState.UNUSABLE:
        return None
    for error in errors or ():
        if isinstance(error, Mapping) and error.get("code") in UNUSABLE_CODES:
            return str(error.get("message") or error["code"])
    return "unusable"


def without_unusable(errors: Sequence[Any]) -> list[Any]:
    """The compute's errors minus a kept Unusable reason (it is Running again)."""
    return [e for e in errors or () if not (isinstance(e, Mapping) and e.get("code") in UNUSABLE_CODES)]
