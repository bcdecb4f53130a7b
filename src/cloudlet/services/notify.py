"""Wake-ups across threads: reconcilers run in threads, agents' long polls wait on the event loop.

``NodeNotifier.notify(node_id)`` may be called from any thread; ``wait(node_id, timeout)`` is
awaited by the poll handler. A replica only wakes the polls it holds; polls held by another
replica notice new work at their next store check (see ``POLL_RECHECK_S`` in the agent routes).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class NodeNotifier:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, asyncio.Event] = {}
        self._mail: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def _event(self, node_id: str) -> asyncio.Event:
        with self._lock:
            event = self._events.get(node_id)
            if event is None:
                event = self._events[node_id] = asyncio.Event()
            return event

    def notify(self, node_id: str) -> None:
        loop = self._loop
        if loop is None:
            return
        event = self._event(node_id)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)

    async def wait(self, node_id: str, timeout: float) -> bool:
        event = self._event(node_id)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            event.clear()

    def forget(self, node_id: str) -> None:
        with self._lock:
            self._events.pop(node_id, None)
            self._mail.pop(node_id, None)

    # -- run specs handed straight to a waiting poll ------------------------------------------
    def deliver(self, deliveries: list[tuple[str, dict[str, Any]]]) -> None:
        """Committed run specs for nodes' agents: the poll answers with them without a store
        round trip. A spec whose answer never reaches its agent is re-sent from the store (the
        agent does not report having it), so this is a fast path, not the only path."""
        with self._lock:
            for node_id, spec in deliveries:
                self._mail.setdefault(node_id, []).append(spec)
        for node_id in {node_id for node_id, _ in deliveries}:
            self.notify(node_id)

    def take(self, node_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return self._mail.pop(node_id, [])
