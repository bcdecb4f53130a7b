"""The events feed's wake-ups (``services/core/feed_wake.py``): a commit's wake-up reaches the
streams of its workspaces from any thread, coalesces, and crosses to the other workers over the
real wake bus; a commit that inserts events records them in its effects."""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

from cloudlet.domain.events import EventType
from cloudlet.services.core import effects, events, feed_wake, wake
from cloudlet.services.core.clock import utcnow
from cloudlet.services.core.feed_wake import FeedWake
from cloudlet.store import db
from cloudlet.store.schema import ResourceGroup, Subscription, Workspace


def test_a_wake_up_from_another_thread_reaches_the_streams_of_its_workspaces() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        hub = FeedWake()
        with hub.listen(1) as one, hub.listen(2) as two, hub.listen(None) as every:
            for listener in (one, two, every):
                assert await listener.wait(0)  # born woken: the first read is at once
                listener.take()
            threading.Thread(target=hub.published, args=([1],)).start()
            woken = await one.wait(5), await every.wait(5), await two.wait(0.2)
        assert hub.listening == 0
        return woken

    assert asyncio.run(scenario()) == (True, True, False)


def test_a_burst_of_wake_ups_while_a_stream_reads_makes_one_more_read() -> None:
    async def scenario() -> list[bool]:
        hub = FeedWake()
        with hub.listen(7) as listener:
            listener.take()  # reading
            for _ in range(50):
                hub.wake_here(frozenset({7}))
            await asyncio.sleep(0)  # the loop runs the wake-ups' callbacks
            first = await listener.wait(1)
            listener.take()  # the one read after the burst
            second = await listener.wait(0.2)
        return [first, second]

    assert asyncio.run(scenario()) == [True, False]


def test_a_wake_up_crosses_to_the_other_workers_with_its_workspaces() -> None:
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM) for _ in range(2)]
    a = wake.WakeBus(pairs[0][0], [pairs[1][1]])
    b = wake.WakeBus(pairs[1][0], [pairs[0][1]])
    here = FeedWake(share=lambda payload: a.send(wake.EVENTS, payload))
    there = FeedWake()
    b.listen({wake.EVENTS: there.received})

    async def scenario() -> tuple[bool, bool]:
        with there.listen(3) as watching, there.listen(4) as other:
            watching.take()
            other.take()
            here.published({3})
            return await watching.wait(5), await other.wait(0.3)

    assert asyncio.run(scenario()) == (True, False)


def test_the_payload_names_workspaces_or_all() -> None:
    assert feed_wake.decode(feed_wake.encode(frozenset({3, 12}))) == {3, 12}
    assert feed_wake.encode(frozenset(range(feed_wake.MAX_NAMED + 1))) == ""
    assert feed_wake.decode("") == feed_wake.ALL
    assert feed_wake.decode("x") == feed_wake.ALL  # unreadable: every stream looks


def test_a_commit_that_inserts_events_publishes_their_workspaces(tmp_path: Path) -> None:
    engine = db.make_engine(db.sqlite_url(tmp_path))
    db.migrate(engine)
    sessions = db.session_factory(engine)
    heard: list[frozenset[int]] = []
    effects.Publisher(on_events=heard.append).install(sessions)
    with sessions.begin() as session:
        session.add(Subscription(id="s", display_name="s"))
        session.flush()
        session.add(ResourceGroup(id=1, subscription_id="s", name="rg", location="l"))
        session.flush()
        session.add(
            Workspace(id=4, resource_group_id=1, name="ws", location="l", tags={}, created_on=utcnow())
        )
    assert heard == []  # nothing recorded an event: nothing to wake
    with sessions.begin() as session:
        events.record(session, EventType.JOB, 4, "j", None, "Queued", "Running")
    assert heard == [frozenset({4})]
    with sessions.begin() as session:
        events.record(session, EventType.JOB, 4, "j", None, "Running", "Completed")
        session.rollback()
    assert heard == [frozenset({4})]  # a rolled-back event wakes nobody
    engine.dispose()
