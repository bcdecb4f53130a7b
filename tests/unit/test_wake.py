"""The wake-ups between worker processes (``services/core/wake.py``), the node notifier's side of them
(``services/core/notify.py``) and ``--workers`` parsing: real Unix datagram pairs and a real event loop,
in one process."""

from __future__ import annotations

import asyncio
import functools
import json
import queue
import socket
from typing import Any

import pytest

from cloudlet.services.core import notify, wake
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.serving import parse_workers


def _buses(count: int) -> list[wake.WakeBus]:
    """COUNT workers' buses, wired as the supervisor wires them."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(count)]
    return [wake.WakeBus(pairs[i][0], [p[1] for j, p in enumerate(pairs) if j != i]) for i in range(count)]


def test_a_wake_up_reaches_every_other_worker_and_not_the_sender() -> None:
    buses = _buses(3)
    heard: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
    for i, bus in enumerate(buses):
        bus.listen({wake.NODE: functools.partial(lambda i, payload: heard.put((i, payload)), i)})
    buses[0].send(wake.NODE, "n-1")
    got = {heard.get(timeout=5), heard.get(timeout=5)}
    assert got == {(1, "n-1"), (2, "n-1")}
    with pytest.raises(queue.Empty):
        heard.get(timeout=0.2)


def test_a_shared_event_wakes_the_same_loop_elsewhere() -> None:
    a, b = _buses(2)
    there = wake.SharedEvent(b, wake.CLUSTERS)
    b.listen({wake.CLUSTERS: there.set_here})
    here = wake.SharedEvent(a, wake.CLUSTERS)
    here.set()
    assert here.is_set()
    assert there.wait(5)


def test_a_bus_without_peers_sends_nowhere() -> None:
    bus = wake.WakeBus()
    assert not bus.shared
    bus.send(wake.NODE, "n-1")  # no error, no effect


class _Recorder:
    def __init__(self) -> None:
        self.woken: list[str] = []
        self.mailed: list[tuple[str, dict[str, Any]]] = []

    def wake(self, node_id: str) -> None:
        self.woken.append(node_id)

    def mail(self, node_id: str, spec: dict[str, Any]) -> None:
        self.mailed.append((node_id, spec))


def test_with_peers_a_spec_goes_to_every_worker_and_is_kept_here_too() -> None:
    async def scenario() -> None:
        peers = _Recorder()
        notifier = NodeNotifier(peers)
        notifier.bind(asyncio.get_running_loop())
        notifier.deliver([("n-new", {"run": "r1"})])  # a node that has not polled yet, anywhere
        assert peers.mailed == [("n-new", {"run": "r1"})]
        assert notifier.take("n-new") == [{"run": "r1"}]
        poll = asyncio.create_task(notifier.wait("n-here", 5))
        await asyncio.sleep(0)
        notifier.deliver([("n-here", {"run": "r2"})])
        assert await poll is True
        assert notifier.take("n-here") == [{"run": "r2"}]
        assert peers.mailed[-1] == ("n-here", {"run": "r2"})  # its poll here may be abandoned

    asyncio.run(scenario())


def test_a_peer_spec_is_kept_and_wakes_a_poll_here() -> None:
    async def scenario() -> None:
        notifier = NodeNotifier(_Recorder())
        notifier.bind(asyncio.get_running_loop())
        notifier.receive("n-1", {"run": "r1"})  # its first poll may come here next
        assert notifier.take("n-1") == [{"run": "r1"}]
        poll = asyncio.create_task(notifier.wait("n-1", 5))
        await asyncio.sleep(0)
        notifier.receive("n-1", '{"run":"r2"}')  # as a peer's datagram carries it: decoded when taken
        assert await poll is True
        assert notifier.take("n-1") == [{"run": "r2"}]

    asyncio.run(scenario())


def test_peer_mail_older_than_the_resend_time_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        notifier = NodeNotifier(_Recorder())
        notifier.bind(asyncio.get_running_loop())
        await notifier.wait("n-1", 0)  # polled here once
        notifier.receive("n-1", {"run": "old"})
        monkeypatch.setattr(notify, "PEER_MAIL_FRESH_S", -1.0)
        assert notifier.take("n-1") == []

    asyncio.run(scenario())


def test_without_peers_mail_waits_for_the_next_poll_as_before() -> None:
    async def scenario() -> None:
        notifier = NodeNotifier()
        notifier.bind(asyncio.get_running_loop())
        notifier.deliver([("n-1", {"run": "r1"})])
        assert notifier.take("n-1") == [{"run": "r1"}]

    asyncio.run(scenario())


def test_a_spec_too_big_for_a_datagram_goes_as_a_wake_up() -> None:
    a, b = _buses(2)
    heard: queue.SimpleQueue[tuple[bytes, str]] = queue.SimpleQueue()
    b.listen(
        {kind: functools.partial(lambda k, p: heard.put((k, p)), kind) for kind in (wake.NODE, wake.MAIL)}
    )
    peers = wake.NodePeers(a)
    peers.mail("n-1", {"run": "r1"})
    kind, payload = heard.get(timeout=5)
    node_id, encoded = wake.parse_mail(payload)  # the spec stays JSON until a poll here takes it
    assert kind == wake.MAIL and node_id == "n-1" and json.loads(encoded) == {"run": "r1"}
    peers.mail("n-1", {"run": "r2", "env": {"BIG": "x" * wake.MAX_DATAGRAM}})
    assert heard.get(timeout=5) == (wake.NODE, "n-1")


@pytest.mark.parametrize(("text", "count"), [("1", 1), ("4", 4), (" 2 ", 2)])
def test_workers_parse(text: str, count: int) -> None:
    assert parse_workers(text) == count


def test_workers_auto_is_the_usable_cpus_at_most_8() -> None:
    assert 1 <= parse_workers("auto") <= 8


@pytest.mark.parametrize("text", ["0", "-1", "65", "two", ""])
def test_workers_refused(text: str) -> None:
    with pytest.raises(ValueError, match="whole number from 1 to 64"):
        parse_workers(text)
