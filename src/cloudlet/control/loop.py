"""One control loop for every reconciler: a thread, an interval, a wake-up, a pass counter, leases.

A reconciler subclasses ``ReconcileLoop`` and implements ``pass_once(now)``, which returns how long
to wait before the next pass (0: at once). The loop counts finished passes and when the last one
began, so tests (and ``GET /api/v1/system/reconcilers``) can wait for N passes instead of sleeping
and hoping. A failing pass is logged and counted; it never stops the loop. Within a pass, each item (a
cluster, a job, a node, an operation) is worked on inside ``one_item``: its failure is logged,
recorded on it, and undone, and the pass goes on to the next item (one bad row must not stop a
loop that serves everyone).

``LeaseCache`` keeps the named leases (``services/core/leases.py``) a replica holds: a lease with more
than three quarters of its time left is used as is (no store round trip); every pass still
re-asserts it inside its own writing transaction (``still_held``), so the fencing token holds.
Renewing once a quarter of the TTL has passed (not half) is what lets a holder ride out a pause —
a loaded machine's scheduler, a slow store — of most of the TTL: renewed at half, a pause of a
little over half the TTL let another replica take the lease from a live holder.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from cloudlet.services.core import leases
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.metrics import RECONCILE_PASS

log = logging.getLogger("cloudlet.control")
RENEW_LEFT = 0.75  # a held lease is renewed once less than this share of its TTL is left


@dataclass(frozen=True)
class PassCount:
    passes: int
    last_pass_at: float | None


@contextmanager
def one_item(
    what: str,
    session: Session | None = None,
    on_failure: Callable[[Exception], None] | None = None,
    logger: logging.Logger = log,
) -> Iterator[None]:
    """Work on one item of a pass: an exception is logged with WHAT and swallowed, what the item
    wrote in SESSION is undone (a savepoint: the rest of the pass keeps its writes), and
    ON_FAILURE records it on the item (in SESSION, after the undo) so whoever looks sees why."""
    try:
        if session is None:
            yield
        else:
            with session.begin_nested():
                yield
    except Exception as exc:
        logger.exception("%s failed", what)
        if on_failure is not None:
            try:
                on_failure(exc)
            except Exception:  # recording is best effort; the item still stays its own
                logger.exception("could not record the failure of %s", what)


class ReconcileLoop:
    """The thread, the wake-up event and the pass counter shared by the reconcilers."""

    def __init__(
        self, name: str, interval_s: float, clock: Clock = WALL_CLOCK, min_gap_s: float = 0.0
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.clock = clock
        # A burst of wake-ups costs one pass per gap, not one pass each.
        self.min_gap_s = min_gap_s
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._count_lock = threading.Lock()
        self._passes = 0
        self._last_pass_at: float | None = None

    # -- what a reconciler provides ----------------------------------------------------------
    def pass_once(self, now: float) -> float:
        """Run one pass; return the seconds to wait before the next (0: at once)."""
        raise NotImplementedError

    def on_stop(self) -> None:
        """Release what the loop holds beyond its thread (worker pools)."""

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        self.on_stop()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def counted(self) -> PassCount:
        with self._count_lock:
            return PassCount(self._passes, self._last_pass_at)

    def run_pass(self) -> float:
        """One counted pass now (the loop's body; tests may call it directly)."""
        began = self.clock.now()
        timer = time.perf_counter()
        try:
            delay = self.pass_once(began)
        except Exception:  # the loop lives on; the next pass retries
            log.exception("%s pass failed", self.name)
            delay = self.interval_s
        finally:
            RECONCILE_PASS.labels(self.name).observe(time.perf_counter() - timer)
            with self._count_lock:
                self._passes += 1
                self._last_pass_at = began
        return delay

    def _run(self) -> None:
        while not self._stop.is_set():
            began = self.clock.now()
            delay = self.run_pass()
            if delay > 0:
                self.wake.wait(min(delay, self.interval_s))
                self.wake.clear()
            rest = began + self.min_gap_s - self.clock.now()
            if rest > 0:
                self._stop.wait(rest)


class LeaseCache:
    """The named leases one replica holds, with their fencing tokens and expiry times."""

    def __init__(self, sessions: sessionmaker[Session], replica_id: str, ttl_s: float) -> None:
        self.sessions = sessions
        self.replica_id = replica_id
        self.ttl_s = ttl_s
        self._held: dict[str, tuple[int, float]] = {}  # name -> (token, expires at)

    def token(self, name: str, now: float) -> int | None:
        """The lease's fencing token if this replica holds it (taking or renewing it), else None."""
        held = self._held.get(name)
        if held is not None and held[1] - now > self.ttl_s * RENEW_LEFT:
            return held[0]
        token = leases.acquire(self.sessions, name, self.replica_id, self.ttl_s)
        if token is None:
            self._held.pop(name, None)
        else:
            self._held[name] = (token, now + self.ttl_s)
        return token

    def holds_any(self, now: float) -> bool:
        """Whether this replica holds a lease now, by its own reckoning (``cloudlet/serving.py``:
        another worker's wake-up of a loop concerns only the worker doing its work)."""
        return any(expires > now for _, expires in self._held.values())

    def still_held(self, session: Session, name: str, token: int) -> bool:
        """Re-assert inside a writing transaction; a lost lease is forgotten here."""
        if leases.still_held(session, name, self.replica_id, token):
            return True
        self.forget(name)
        return False

    def forget(self, name: str) -> None:
        self._held.pop(name, None)
