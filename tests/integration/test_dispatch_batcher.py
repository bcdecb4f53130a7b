"""Group commit of the dispatch hot path (control/dispatch_batcher.py) over a real SQLite store:
requests that arrive together share one transaction; a refused one leaves nothing behind and
does not take its batch-mates down."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from cloudlet.control.dispatch_batcher import Answer, DispatchBatcher, Round
from cloudlet.control.notify import NodeNotifier
from cloudlet.domain.errors import CloudletError
from cloudlet.server import open_store
from cloudlet.services.storage import DataRoot
from cloudlet.store.schema import Subscription


def _batcher(home: Path) -> tuple[DispatchBatcher, Any]:
    sessions, _reads, _installation, _secret = open_store(home, None)
    batcher = DispatchBatcher(
        sessions, DataRoot(home / "data"), lambda: "http://test", NodeNotifier(), lambda: None
    )
    return batcher, sessions


def _subscriptions(sessions: Any, prefix: str) -> set[str]:
    with sessions() as session:
        rows = session.scalars(select(Subscription.id).where(Subscription.id.like(prefix + "%")))
        return set(rows)


async def _in_one_batch(batcher: DispatchBatcher, works: list[Callable[[Round], Answer]]) -> list[Any]:
    """Hold the writer thread with a first request, queue WORKS behind it, then let it go: the
    writer takes them all as its next batch."""
    batcher.start(asyncio.get_running_loop())
    gate = threading.Event()

    def hold(_round: Round) -> Answer:
        gate.wait(10)
        return lambda _placed: "held"

    first = asyncio.ensure_future(batcher.apply(hold))
    await asyncio.sleep(0.1)  # the writer is inside `hold` now
    rest = [asyncio.ensure_future(batcher.apply(work)) for work in works]
    await asyncio.sleep(0.05)
    gate.set()
    try:
        return list(await asyncio.gather(first, *rest, return_exceptions=True))[1:]
    finally:
        batcher.stop()


def test_requests_that_arrive_together_share_one_transaction(tmp_path: Path) -> None:
    batcher, sessions = _batcher(tmp_path)
    rounds: list[int] = []

    def add(name: str) -> Callable[[Round], Answer]:
        def work(round_: Round) -> Answer:
            rounds.append(id(round_))
            round_.session.add(Subscription(id=name, display_name=name))
            return lambda _placed: name

        return work

    names = [f"grp-{i}" for i in range(10)]
    answers = asyncio.run(_in_one_batch(batcher, [add(n) for n in names]))
    assert answers == names
    assert len(set(rounds)) == 1, "the ten requests were not applied in one transaction"
    assert _subscriptions(sessions, "grp-") == set(names)


def test_a_refused_request_leaves_nothing_and_spares_its_batch(tmp_path: Path) -> None:
    batcher, sessions = _batcher(tmp_path)
    calls: dict[str, int] = {}

    def add(name: str, refuse: bool = False) -> Callable[[Round], Answer]:
        def work(round_: Round) -> Answer:
            calls[name] = calls.get(name, 0) + 1
            round_.session.add(Subscription(id=name, display_name=name))
            round_.session.flush()  # written, then refused: the write must not survive
            if refuse:
                raise CloudletError("Refused", f"{name} is refused", "name", 409)
            return lambda _placed: name

        return work

    answers = asyncio.run(_in_one_batch(batcher, [add("ok-a"), add("ok-b", refuse=True), add("ok-c")]))
    assert answers[0] == "ok-a" and answers[2] == "ok-c"
    assert isinstance(answers[1], CloudletError) and answers[1].status == 409
    assert _subscriptions(sessions, "ok-") == {"ok-a", "ok-c"}
    # The batch was tried together up to the refusal, then each request alone.
    assert calls == {"ok-a": 2, "ok-b": 2, "ok-c": 1}


def test_a_store_conflict_at_commit_is_replayed_request_by_request(tmp_path: Path) -> None:
    """Two requests in one batch writing the same key: the unique constraint fails the batch's
    flush; replayed alone, the first succeeds and the second gets the store's error."""
    batcher, sessions = _batcher(tmp_path)

    def add(name: str, label: str) -> Callable[[Round], Answer]:
        def work(round_: Round) -> Answer:
            round_.session.add(Subscription(id=name, display_name=label))
            return lambda _placed: label

        return work

    answers = asyncio.run(_in_one_batch(batcher, [add("dup-1", "first"), add("dup-1", "second")]))
    assert answers[0] == "first"
    assert isinstance(answers[1], Exception)
    assert _subscriptions(sessions, "dup-") == {"dup-1"}
    with sessions() as session:
        row = session.get(Subscription, "dup-1")
        assert row is not None and row.display_name == "first"


@pytest.mark.parametrize("size", [1, 3])
def test_an_answer_that_fails_to_render_does_not_undo_the_writes(tmp_path: Path, size: int) -> None:
    batcher, sessions = _batcher(tmp_path)

    def add(name: str) -> Callable[[Round], Answer]:
        def work(round_: Round) -> Answer:
            round_.session.add(Subscription(id=name, display_name=name))

            def answer(_placed: Any) -> Any:
                raise RuntimeError("render failed")

            return answer

        return work

    names = [f"ren{size}-{i}" for i in range(size)]
    answers = asyncio.run(_in_one_batch(batcher, [add(n) for n in names]))
    assert all(isinstance(a, RuntimeError) for a in answers)
    assert _subscriptions(sessions, f"ren{size}-") == set(names)
