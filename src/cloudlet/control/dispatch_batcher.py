"""Group commit for the dispatch hot path: job submissions and run reports.

Each of these used to be its own write transaction on a thread-pool thread, followed by its own
scheduling round. Under load (many clients submitting, many nodes finishing) that is dozens of
threads queueing for the store's single writer and the GIL, and a scheduling round per request.
Here one writer thread takes every request waiting, applies them all in one transaction, runs one
scheduling round over the nodes they freed and the computes they fed, commits once, and answers
each request. A batch of one costs what the old path did; a batch of eight costs a little more
than one. Run reports go first, in batches of their own: a node waits on its exit's answer.

A request whose work raises (a name already taken, a bad token) must not take its batch-mates
down, and must leave nothing behind: the batch is rolled back and each of its requests is applied
again in a transaction of its own (``Round.alone``: checks a first try leaves to the store's
constraints run then, to name the problem). Errors are rare, so the replay costs nothing in
practice. A store that is busy (``sqlalchemy.exc.TimeoutError``: no connection, or the write gate
held past its bound) is not a refusal: the whole batch hears it (503, retry) without a replay, and
a request that waited in the queue longer than ``queue_timeout_s`` hears it without being applied.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import TimeoutError as StoreTimeout
from sqlalchemy.orm import Session, sessionmaker

from cloudlet.services.core.batch import Answer, Deliveries, Round, Work
from cloudlet.services.core.notify import NodeNotifier
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import dispatch, prepared_specs
from cloudlet.store.db import StoreBusy

log = logging.getLogger("cloudlet.dispatch")

MAX_BATCH = 64  # requests per transaction: bounds a batch's latency for its first request


@dataclass
class _Request:
    work: Work
    future: asyncio.Future[Any]
    urgent: bool = False
    queued_at: float = field(default_factory=time.monotonic)


class DispatchBatcher:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        data: DataRoot,
        endpoint: Callable[[], str],
        notifier: NodeNotifier,
        rescale: Callable[[], None],
        queue_timeout_s: float | None = None,
    ) -> None:
        self._sessions = sessions
        self._queue_timeout_s = queue_timeout_s
        self._data = data
        self._endpoint = endpoint
        self._notifier = notifier
        self._rescale = rescale
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._serve, name="dispatch-batcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    async def apply(self, work: Work, urgent: bool = False) -> Any:
        """Apply WORK in a coming batch; its answer, or the exception it raised. URGENT work (run
        reports) goes before the rest."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put(_Request(work, future, urgent))
        return await future

    # -- the writer thread ----------------------------------------------------------------------
    def _serve(self) -> None:
        urgent: deque[_Request] = deque()
        normal: deque[_Request] = deque()
        stopping = False
        while True:
            if not urgent and not normal:
                if stopping:
                    return
                first = self._queue.get()
                if first is None:
                    return
                (urgent if first.urgent else normal).append(first)
            while not stopping:  # take everything waiting
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True  # after what is queued
                else:
                    (urgent if item.urgent else normal).append(item)
            # Run reports first, in batches of their own: a node waits for its exit's answer to
            # start its next job, while a submission only waits to hear it was queued.
            source = urgent or normal
            batch = [source.popleft() for _ in range(min(MAX_BATCH, len(source)))]
            batch, late = self._split_late(batch)
            outcomes: list[tuple[_Request, Any, BaseException | None]] = [(r, None, e) for r, e in late]
            try:
                outcomes += self._run_batch(batch) if batch else []
            except StoreTimeout as exc:  # busy, not broken: retried by the client
                log.warning("dispatch batch of %d: %s", len(batch), exc)
                outcomes += [(request, None, exc) for request in batch]
            except Exception as exc:  # the store itself failed: every request hears it
                log.exception("dispatch batch of %d failed", len(batch))
                outcomes += [(request, None, exc) for request in batch]
            self._resolve(outcomes)

    def _split_late(self, batch: list[_Request]) -> tuple[list[_Request], list[tuple[_Request, StoreBusy]]]:
        """Requests that waited longer than the queue timeout are answered "busy" unapplied: their
        clients would otherwise wait on a queue that is not draining fast enough (and retry)."""
        if self._queue_timeout_s is None:
            return batch, []
        now, limit = time.monotonic(), self._queue_timeout_s
        late = [r for r in batch if now - r.queued_at > limit]
        if not late:
            return batch, []
        busy = StoreBusy(f"the store's writer was busy for over {limit:g} s")
        return [r for r in batch if now - r.queued_at <= limit], [(r, busy) for r in late]

    def _run_batch(self, batch: list[_Request]) -> list[tuple[_Request, Any, BaseException | None]]:
        try:
            return self._commit(batch, strict=True)
        except _Replay:
            pass
        outcomes: list[tuple[_Request, Any, BaseException | None]] = []
        for request in batch:  # one transaction each: a refused request leaves nothing behind
            outcomes += self._commit([request], strict=False)
        return outcomes

    def _commit(
        self, requests: list[_Request], strict: bool
    ) -> list[tuple[_Request, Any, BaseException | None]]:
        """Apply REQUESTS in one transaction. STRICT: any failure aborts it (raises _Replay);
        otherwise a failure is every item's answer."""
        session = self._sessions()
        applied: list[tuple[_Request, Answer]] = []
        try:
            session.begin()
            round_ = Round(session, alone=not strict)
            for request in requests:
                applied.append((request, request.work(round_)))
            wake, rescale = self._schedule(round_)
            session.commit()
        except Exception as exc:
            session.rollback()
            if strict and isinstance(exc, StoreTimeout):
                raise  # busy: replaying each request alone would only wait again, once each
            if strict:
                raise _Replay() from exc
            return [(request, None, exc) for request in requests]
        finally:
            session.close()
        by_node: Deliveries = {}
        for node_id, spec in dispatch.deliveries(session):
            by_node.setdefault(node_id, []).append(spec)
        placed = set(by_node)
        outcomes: list[tuple[_Request, Any, BaseException | None]] = []
        for request, answer in applied:
            try:
                outcomes.append((request, answer(by_node), None))
            except Exception as exc:  # rendering an answer failed: the writes stand
                outcomes.append((request, None, exc))
        # Specs no answer carried go to the nodes' long polls.
        self._notifier.deliver([(node_id, spec) for node_id, specs in by_node.items() for spec in specs])
        for node_id in set(wake) - placed:
            self._notifier.notify(node_id)
        if rescale:
            self._rescale()
        return outcomes

    def _schedule(self, round_: Round) -> tuple[list[str], bool]:
        """The round's scheduling: nodes to wake, and whether the autoscaler must look."""
        wake = dispatch.schedule_freed(
            round_.session, round_.freed, self._data, self._endpoint(), fed=round_.fed, also=round_.freed_on
        )
        # A large attempt left queued: the cluster pass builds its specs before taking the lock.
        prepare = prepared_specs.wanted(round_.session)
        return wake + round_.freed, prepare or any(check() for check in round_.rescale_if)

    def _resolve(self, outcomes: list[tuple[_Request, Any, BaseException | None]]) -> None:
        loop = self._loop
        if loop is None:
            return

        def settle() -> None:
            for request, answer, error in outcomes:
                if request.future.done():  # the client went away
                    continue
                if error is not None:
                    request.future.set_exception(error)
                else:
                    request.future.set_result(answer)

        loop.call_soon_threadsafe(settle)


class _Replay(Exception):
    """A request in a batch was refused: roll the batch back and apply each request alone."""
