"""Wake-ups across threads: reconcilers run in threads, agents' long polls wait on the event loop.

``NodeNotifier.notify(node_id)`` may be called from any thread; ``wait(node_id, timeout)`` is
awaited by the poll handler. A replica wakes the polls it holds, and through ``peers`` (the other
worker processes of the same server: ``services/core/wake.py``) those they hold; polls held by another
server replica notice new work at their next store check (see ``POLL_RECHECK_S`` in the agent
routes).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Protocol

# With peers, mail older than this is dropped unread: a run sent this long ago that its agent does
# not report having is sent again from the store anyway (``dispatch.RESEND_AFTER_S``), and mail
# kept by a worker whose node polls elsewhere now must not come back much later.
PEER_MAIL_FRESH_S = 3.0


class Peers(Protocol):
    """The other worker processes of this server."""

    def wake(self, node_id: str) -> None: ...

    def mail(self, node_id: str, spec: dict[str, Any]) -> None: ...


class NodeNotifier:
    def __init__(self, peers: Peers | None = None) -> None:
        self._peers = peers
        self._loop: asyncio.AbstractEventLoop | None = None
        self._events: dict[str, asyncio.Event] = {}
        self._mail: dict[str, list[tuple[float, dict[str, Any] | str]]] = {}
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
        self.notify_here(node_id)
        if self._peers is not None:
            self._peers.wake(node_id)

    def notify_here(self, node_id: str, seen_only: bool = False) -> None:
        """Wake the node's poll if this process holds it. SEEN_ONLY (a peer's wake-up, for a poll
        that is most likely elsewhere): only for a node that has polled here."""
        loop = self._loop
        if loop is None:
            return
        if seen_only:
            with self._lock:
                if node_id not in self._events:
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
        agent does not report having it), so this is a fast path, not the only path.

        Placing a run marks it sent, so with peers each spec goes to every worker: the node's poll
        may be held by any of them, or not be held yet (a node that just registered). Each keeps it
        briefly (``PEER_MAIL_FRESH_S``); an agent starts a run id once, so a copy it gets twice
        (from another worker, within that time) is harmless."""
        with self._lock:
            for node_id, spec in deliveries:
                self._keep(node_id, spec)
        for node_id, spec in deliveries:
            if self._peers is not None:
                self._peers.mail(node_id, spec)  # wakes the node there too
        for node_id in {node_id for node_id, _ in deliveries}:
            self.notify_here(node_id)

    def receive(self, node_id: str, spec: dict[str, Any] | str) -> None:
        """A spec another worker placed: kept for the node's poll, should it poll here. A str is
        the spec's JSON, decoded only if the poll takes it: with N workers each placed spec
        reaches N - 1 that mostly do not hold its node's poll."""
        with self._lock:
            self._keep(node_id, spec)
        self.notify_here(node_id, seen_only=True)

    def _keep(self, node_id: str, spec: dict[str, Any] | str) -> None:
        now = time.monotonic()
        mail = self._mail.setdefault(node_id, [])
        if self._peers is not None and mail and mail[0][0] < now - PEER_MAIL_FRESH_S:
            mail[:] = [(at, kept) for at, kept in mail if at >= now - PEER_MAIL_FRESH_S]
        mail.append((now, spec))

    def take(self, node_id: str) -> list[dict[str, Any]]:
        with self._lock:
            mail = self._mail.pop(node_id, [])
        if self._peers is None:
            return [_decoded(spec) for _, spec in mail]
        fresh = time.monotonic() - PEER_MAIL_FRESH_S
        return [_decoded(spec) for at, spec in mail if at >= fresh]


def _decoded(spec: dict[str, Any] | str) -> dict[str, Any]:
    return dict(json.loads(spec)) if isinstance(spec, str) else spec
