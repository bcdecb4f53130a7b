"""The simulated clock and its event queue: time jumps straight to the next thing that happens."""

from __future__ import annotations

import heapq
import itertools
from enum import IntEnum
from typing import Any


class SimClock:
    """Simulated wall time in seconds; it only moves forward, and only when told to."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def advance_to(self, when: float) -> None:
        if when < self.now:
            raise ValueError(f"simulated time cannot go back from {self.now} to {when}")
        self.now = when


class EventKind(IntEnum):
    # The order breaks ties at one instant: the world's news first, deadlines last.
    BOOTED = 0  # a node's agent registered (the simulated provider's boot delay is over)
    JOB_ENDED = 1
    EVICTED = 2  # a low-priority node was taken back
    ARRIVED = 3  # a job was submitted
    IDLE_DUE = 4  # a node has been idle for the cluster's idle time: a pass may release it


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, when: float, kind: EventKind, payload: Any) -> None:
        heapq.heappush(self._heap, (when, int(kind), next(self._seq), payload))

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, when: float) -> list[tuple[EventKind, Any]]:
        """Every event at exactly ``when``, in kind order then push order."""
        due = []
        while self._heap and self._heap[0][0] <= when:
            _, kind, _, payload = heapq.heappop(self._heap)
            due.append((EventKind(kind), payload))
        return due
