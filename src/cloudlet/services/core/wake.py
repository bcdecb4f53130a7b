"""Wake-ups between the worker processes of one server (``cloudlet server --workers N``).

Each worker is a replica over the same store, and most of what one replica does reaches the others
through the store. What does not is a wake-up: the work a worker placed for a node whose agent's long
poll another worker holds, a demand change for the cluster reconciler that another worker leads, an
operation for its operation reconciler, a commit that grew the events feed whose streams another
worker serves, a page load of an instance whose idle watch runs elsewhere.
Without a wake-up these wait for the other worker's next look at the store (``POLL_RECHECK_S`` for a
poll, the loops' intervals for the reconcilers).

Transport: one Unix datagram socket pair per worker slot, made by the supervisor before it starts
any worker (``cloudlet/serving.py``): a worker reads its slot's end and writes to every other slot's
write end. A datagram is a kind byte and a UTF-8 payload. A send never blocks: a full buffer drops
the datagram, and the receiver's own store checks (the poll's recheck, the loops' intervals) remain
the slow path, as for two replicas on two hosts. The pairs outlive the workers (the supervisor holds
both ends), so a restarted worker reads the same inbox.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

log = logging.getLogger("cloudlet.wake")

NODE = b"n"  # payload: a node id; its agent's long poll looks at the store now
MAIL = b"m"  # payload: node id, newline, run spec JSON: a run placed for the node (``NodeNotifier.deliver``)
CLUSTERS = b"c"  # the cluster reconciler's wake
OPERATIONS = b"o"  # the operation reconciler's wake
PARENTS = b"p"  # the parent-job loop's wake (pipelines, sweeps: a child moved)
NOTIFICATIONS = b"t"  # the notification loop's wake (a job's end recorded deliveries)
ACTIVITY = b"a"  # payload: "<instance name> <time.time()>": a deliberate request to an instance's app
EVENTS = b"e"  # payload: workspace ids, comma-separated ("": all): the events feed grew (``feed_wake.py``)
MAX_DATAGRAM = 65536  # a run spec is ~1-3 KB; a larger one goes as a plain wake-up (NODE)


class WakeBus:
    """This worker's inbox and the other workers' inboxes. ``WakeBus()`` (no peers) is the bus of
    a server that runs alone: sends go nowhere."""

    def __init__(self, inbox: socket.socket | None = None, peers: Iterable[socket.socket] = ()) -> None:
        self._inbox = inbox
        self._peers = list(peers)
        self._thread: threading.Thread | None = None

    @classmethod
    def from_fds(cls, inbox_fd: int, peer_fds: Iterable[int]) -> WakeBus:
        def adopt(fd: int) -> socket.socket:
            return socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM, fileno=fd)

        return cls(adopt(inbox_fd), [adopt(fd) for fd in peer_fds])

    @property
    def shared(self) -> bool:
        return bool(self._peers)

    @property
    def members(self) -> int:
        """The workers on this bus, this one included."""
        return len(self._peers) + 1

    def send(self, kind: bytes, payload: str = "") -> None:
        """To every other worker; from any thread; never blocks."""
        message = kind + payload.encode()
        for peer in self._peers:
            try:
                peer.send(message, socket.MSG_DONTWAIT)
            except OSError as exc:  # a full inbox (its worker is stuck or restarting): dropped
                log.debug("wake-up %r dropped: %s", message[:40], exc)

    def listen(self, handlers: Mapping[bytes, Callable[[str], None]]) -> None:
        """Dispatch what arrives, on a thread of its own, to the handler of its kind."""
        inbox = self._inbox
        if inbox is None or self._thread is not None:
            return

        def run() -> None:
            while True:
                try:
                    message = inbox.recv(MAX_DATAGRAM)
                except OSError:
                    return  # closed: the process is ending
                handler = handlers.get(message[:1])
                if handler is None:
                    continue
                try:
                    handler(message[1:].decode(errors="replace"))
                except Exception:  # a wake-up is best effort; the store is the truth
                    log.exception("wake-up %r failed", message[:40])

        self._thread = threading.Thread(target=run, name="wake-bus", daemon=True)
        self._thread.start()


class SharedEvent(threading.Event):
    """A control loop's wake-up that also wakes the same loop in the other workers: the one holding
    the loop's lease does the pass (the others find the lease taken and wait again)."""

    def __init__(self, bus: WakeBus, kind: bytes) -> None:
        super().__init__()
        self._bus, self._kind = bus, kind

    def set(self) -> None:
        super().set()
        self._bus.send(self._kind)

    def set_here(self, _payload: str = "") -> None:
        super().set()


class NodePeers:
    """``NodeNotifier``'s peers over the bus: wake-ups and run specs for nodes' polls."""

    def __init__(self, bus: WakeBus) -> None:
        self._bus = bus

    def wake(self, node_id: str) -> None:
        self._bus.send(NODE, node_id)

    def mail(self, node_id: str, spec: dict[str, Any]) -> None:
        payload = node_id + "\n" + json.dumps(spec, separators=(",", ":"))
        if len(payload) >= MAX_DATAGRAM - 1:
            self.wake(node_id)  # its poll reads the spec from the store
        else:
            self._bus.send(MAIL, payload)


def parse_mail(payload: str) -> tuple[str, str]:
    """The node id and the spec's JSON (left encoded: ``NodeNotifier.receive`` decodes it only for
    a poll that takes it)."""
    node_id, _, spec = payload.partition("\n")
    return node_id, spec
