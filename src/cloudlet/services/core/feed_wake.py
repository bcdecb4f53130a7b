"""Waking the events feed's streams when a commit recorded events, instead of only polling.

A commit that inserted lifecycle events records their workspaces in its effects
(``services/core/events.insert_pending``); the publisher hears the commit and calls
``FeedWake.published``, which wakes, at once, every open stream of this process that watches one of
those workspaces (or all of them), and sends the same wake-up to the other workers of
``--workers N`` (``wake.EVENTS``). A woken stream reads the store once. What no wake-up reaches (a
replica on another host over a shared PostgreSQL store, a datagram dropped by a full inbox) is
seen by each stream's fallback poll (``CLOUDLET_EVENTS_POLL_S``).

Streams live on the server's event loop; commits happen on worker threads (and wake-ups from the
other workers arrive on the bus's thread). Each stream owns an ``asyncio.Event`` that only its
loop touches: a wake-up from any thread is handed to that loop (``call_soon_threadsafe``), one
callback per loop per wake-up, never one per stream. The event coalesces: however many commits
land while a stream reads, it reads again once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable
from types import TracebackType

ALL = frozenset[int]()  # a wake-up that names no workspace: every stream looks
MAX_NAMED = 64  # a commit touching more workspaces wakes every stream (one short datagram)


def encode(workspaces: frozenset[int]) -> str:
    """The wake-up's payload for the other workers: the workspace ids, or "" for every stream."""
    return "" if len(workspaces) > MAX_NAMED else ",".join(map(str, sorted(workspaces)))


def decode(payload: str) -> frozenset[int]:
    try:
        return frozenset(int(part) for part in payload.split(",") if part)
    except ValueError:  # not ours to judge: look, the store is the truth
        return ALL


class FeedWake:
    """The open streams of this process and what wakes them. SHARE sends a wake-up's payload to
    the other workers (nothing when the server runs alone)."""

    def __init__(self, share: Callable[[str], None] = lambda _payload: None) -> None:
        self._share = share
        self._lock = threading.Lock()
        self._streams: set[FeedListener] = set()

    def published(self, workspaces: Iterable[int]) -> None:
        """A commit here recorded events in WORKSPACES: wake the streams here and in the other
        workers. From any thread; never blocks."""
        named = frozenset(workspaces)
        self.wake_here(named)
        self._share(encode(named))

    def received(self, payload: str) -> None:
        """Another worker's wake-up (``wake.EVENTS``)."""
        self.wake_here(decode(payload))

    def wake_here(self, workspaces: frozenset[int]) -> None:
        with self._lock:
            woken: dict[asyncio.AbstractEventLoop, list[asyncio.Event]] = {}
            for stream in self._streams:
                if stream.wants(workspaces):
                    woken.setdefault(stream.loop, []).append(stream.event)
        for loop, events in woken.items():
            with contextlib.suppress(RuntimeError):  # a closed loop (shutting down): nobody waits
                loop.call_soon_threadsafe(_set_all, events)

    def listen(self, workspace_id: int | None) -> FeedListener:
        """A stream's wake-ups, for WORKSPACE_ID (None: every workspace's); made on the stream's
        event loop, and ``close()``d (or used as a context manager) when the stream ends."""
        listener = FeedListener(self, workspace_id, asyncio.get_running_loop())
        with self._lock:
            self._streams.add(listener)
        return listener

    def forget(self, listener: FeedListener) -> None:
        with self._lock:
            self._streams.discard(listener)

    @property
    def listening(self) -> int:
        with self._lock:
            return len(self._streams)


def _set_all(events: list[asyncio.Event]) -> None:
    for event in events:
        event.set()


class FeedListener:
    """One stream's wake-ups. It starts woken: events committed between the stream's first page
    and its listening are read at once, not at the next poll."""

    def __init__(self, feed: FeedWake, workspace_id: int | None, loop: asyncio.AbstractEventLoop) -> None:
        self.feed, self.workspace_id, self.loop = feed, workspace_id, loop
        self.event = asyncio.Event()
        self.event.set()

    def wants(self, workspaces: frozenset[int]) -> bool:
        return self.workspace_id is None or not workspaces or self.workspace_id in workspaces

    @property
    def woken(self) -> bool:
        return self.event.is_set()

    async def wait(self, timeout: float) -> bool:
        """Until woken or TIMEOUT seconds have passed (True: woken)."""
        if self.event.is_set():
            return True
        if timeout <= 0:
            return False
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def take(self) -> None:
        """The stream reads now: a wake-up from here on means a read after this one."""
        self.event.clear()

    def close(self) -> None:
        self.feed.forget(self)

    def __enter__(self) -> FeedListener:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
