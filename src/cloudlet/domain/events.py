"""The events feed (pure): what an event is, the feed's retention window, and the wire forms.

Every lifecycle change of a job, compute, node, operation or deployment is an event with a
sequence number (``services/core/events.py`` writes it in the change's own transaction). A reader
pages with ``since`` (the last seq it saw) and, past the retention window, is told the oldest seq
still kept so it knows it missed some.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any


class EventType(StrEnum):
    JOB = "job"
    COMPUTE = "compute"
    NODE = "node"
    OPERATION = "operation"
    DEPLOYMENT = "deployment"


@dataclass(frozen=True)
class Event:
    seq: int
    at: float
    workspace_id: int
    type: str
    name: str
    compute: str | None
    from_state: str | None
    to_state: str
    detail: dict[str, Any] | None

    def document(self) -> dict[str, Any]:
        """The event on the wire (the workspace is the URL's; its row id is not shown)."""
        doc = asdict(self)
        del doc["workspace_id"]
        return doc


@dataclass(frozen=True)
class Retention:
    """How long events are kept: the newer of MAX_AGE_S and the last MAX_EVENTS (both bounds
    apply: an event is pruned once it is older than the age or beyond the count)."""

    max_age_s: float = 7 * 86400.0
    max_events: int = 1_000_000
    prune_every_s: float = 300.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Retention:
        env = os.environ if env is None else env
        return cls(
            max_age_s=float(env.get("CLOUDLET_EVENTS_MAX_AGE_S") or cls.max_age_s),
            max_events=int(env.get("CLOUDLET_EVENTS_MAX_COUNT") or cls.max_events),
            prune_every_s=float(env.get("CLOUDLET_EVENTS_PRUNE_EVERY_S") or cls.prune_every_s),
        )

    def first_kept(self, now: float, newest_seq: int, first_seq_at_cutoff: int | None) -> int:
        """The lowest seq kept: above the count bound, and at or after the age cutoff
        (FIRST_SEQ_AT_CUTOFF: the first seq at or after ``now - max_age_s``, None if none)."""
        by_count = newest_seq - self.max_events + 1
        by_age = newest_seq + 1 if first_seq_at_cutoff is None else first_seq_at_cutoff
        return max(by_count, by_age, 1)


def missed(since: int, pruned_below: int) -> bool:
    """Whether a reader that last saw SINCE has lost events to pruning: some seq after SINCE is
    below the pruning mark (every seq below PRUNED_BELOW is gone)."""
    return since + 1 < pruned_below


def sse_message(event: Event) -> str:
    """One server-sent event: ``id`` is the seq (a reconnecting client sends it back as
    ``Last-Event-ID``), ``event`` its type, ``data`` the JSON document."""
    data = json.dumps(event.document(), separators=(",", ":"))
    return f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n"


HEARTBEAT = ": keep-alive\n\n"  # a comment line: keeps proxies from closing an idle stream
