"""The control loop base: passes are counted (failed ones too) and a failing pass never stops the
loop; a wake-up starts the next pass early; leases are cached and fenced."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from sqlalchemy import select

from cloudlet.control.loop import LeaseCache, ReconcileLoop
from cloudlet.store.schema import Lease
from tests.unit.control_fakes import FakeClock, new_store


class FlakyLoop(ReconcileLoop):
    """Every other pass raises (if FAILING); the fourth pass says so."""

    def __init__(self, interval_s: float, failing: bool = True) -> None:
        super().__init__("flaky", interval_s, FakeClock())
        self.failing = failing
        self.calls = 0
        self.fourth = threading.Event()

    def pass_once(self, now: float) -> float:
        self.calls += 1
        if self.calls >= 4:
            self.fourth.set()
        if self.failing and self.calls % 2:
            raise RuntimeError("this pass fails")
        return self.interval_s


def test_failing_passes_are_counted_and_the_loop_lives_on() -> None:
    loop = FlakyLoop(interval_s=0.01)
    loop.start()
    try:
        assert loop.fourth.wait(10)
    finally:
        loop.stop()
    counted = loop.counted()
    assert counted.passes >= 4 and counted.last_pass_at == loop.clock.now()


def test_a_wake_up_starts_the_next_pass_before_the_interval() -> None:
    loop = FlakyLoop(interval_s=3600, failing=False)  # without a wake-up, a pass an hour away
    loop.start()
    try:
        for _ in range(200):  # at most 10 s
            if loop.fourth.wait(0.05):
                break
            loop.wake.set()
        assert loop.fourth.is_set()
    finally:
        loop.stop()


def test_run_pass_counts_one_pass() -> None:
    loop = FlakyLoop(interval_s=1.0)
    assert loop.run_pass() == 1.0  # the failed pass waits the interval
    assert loop.counted().passes == 1


def test_a_lease_is_held_by_one_replica_and_fenced(tmp_path: Path) -> None:
    sessions, _ = new_store(tmp_path / "home")
    mine, theirs = LeaseCache(sessions, "a", ttl_s=10), LeaseCache(sessions, "b", ttl_s=10)
    token = mine.token("compute:1", now=0.0)
    assert token is not None and theirs.token("compute:1", now=0.0) is None
    assert mine.token("compute:1", now=1.0) == token  # cached: no store round trip
    with sessions.begin() as session:
        assert mine.still_held(session, "compute:1", token)
        assert not mine.still_held(session, "compute:1", token + 1)  # a stale token writes nothing


def test_a_held_lease_is_renewed_once_a_quarter_of_its_ttl_has_passed(tmp_path: Path) -> None:
    """So its holder rides out a pause (a loaded machine, a slow store) of most of the TTL. Renewed
    only at half, a pause of a little over half the TTL let another server take the online lease
    from a live holder in the middle of a roll-out (test_online_lease failed under load)."""
    sessions, _ = new_store(tmp_path / "home")
    cache = LeaseCache(sessions, "a", ttl_s=100)

    def stored() -> float:
        with sessions() as session:
            return float(session.scalars(select(Lease.expires_at).where(Lease.name == "online")).one())

    token = cache.token("online", now=0.0)
    first = stored()
    assert cache.token("online", now=20.0) == token and stored() == first  # 80 s left: as is
    assert cache.token("online", now=30.0) == token and stored() > first  # 70 s left: renewed


def test_a_lease_taken_again_after_it_lapsed_is_still_held(tmp_path: Path) -> None:
    """The token a takeover returns is the stored one: the holder's next pass is not wasted."""
    sessions, _ = new_store(tmp_path / "home")
    cache = LeaseCache(sessions, "a", ttl_s=0.01)
    first = cache.token("compute:1", now=0.0)
    time.sleep(0.05)  # the lease lapses (its expiry is wall time, kept by the store)
    again = cache.token("compute:1", now=100.0)
    assert first is not None and again == first + 1
    with sessions.begin() as session:
        assert cache.still_held(session, "compute:1", again)
