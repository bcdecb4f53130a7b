"""The per-process queue snapshot cache (services.jobs.queue_snapshots): one read per compute per
REFRESH_S, a job newer than a whole-queue snapshot reads it again, one reader at a time."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from cloudlet.services.jobs import queue_snapshots
from cloudlet.services.jobs.queue_snapshots import REFRESH_S, Snapshot, snapshot

COMPUTE: Any = SimpleNamespace(workspace_id=1, name="c")


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Snapshot]]:
    made: list[Snapshot] = []

    def build(session: Any, compute: Any, usage: Any = None) -> Snapshot:
        snap = Snapshot(time.time(), "cluster", complete=True, index={1: 0})
        made.append(snap)
        return snap

    queue_snapshots.forget()
    monkeypatch.setattr(queue_snapshots, "build", build)
    yield made
    queue_snapshots.forget()


def test_one_read_per_compute_while_fresh(builds: list[Snapshot]) -> None:
    first = snapshot(None, COMPUTE)  # type: ignore[arg-type]
    assert snapshot(None, COMPUTE, want=1) is first  # type: ignore[arg-type]
    assert len(builds) == 1
    first.taken_at -= REFRESH_S  # expired: read again
    assert snapshot(None, COMPUTE) is not first and len(builds) == 2  # type: ignore[arg-type]


def test_a_job_newer_than_a_whole_queue_reads_it_again_not_a_deep_one(builds: list[Snapshot]) -> None:
    snap = snapshot(None, COMPUTE)  # type: ignore[arg-type]
    assert snapshot(None, COMPUTE, want=2) is not snap and len(builds) == 2  # type: ignore[arg-type]
    builds[-1].complete = False  # the queue goes deeper than the part read: job 2 is "10,000+"
    assert snapshot(None, COMPUTE, want=2) is builds[-1] and len(builds) == 2  # type: ignore[arg-type]


def test_while_another_request_reads_the_queue_a_recent_snapshot_is_shown(builds: list[Snapshot]) -> None:
    old = snapshot(None, COMPUTE)  # type: ignore[arg-type]
    old.taken_at -= REFRESH_S + 0.5  # stale, but within the 5 s promise
    lock = queue_snapshots._locks[(1, "c")]
    lock.acquire()  # another request is building
    try:
        got: list[Snapshot] = []
        reader = threading.Thread(target=lambda: got.append(snapshot(None, COMPUTE)))  # type: ignore[arg-type]
        reader.start()
        reader.join(5)
        assert got == [old] and len(builds) == 1
    finally:
        lock.release()


def test_one_read_of_started_jobs_gives_the_history_and_the_pace() -> None:
    from cloudlet.domain.jobs.fair_share import FairShareConfig, TeamShare

    def row(user: str, nodes: int, status: str, started: float, ended: float | None) -> Any:
        return SimpleNamespace(
            created_by=user, instance_count=nodes, status=status, started_at=started, ended_at=ended
        )

    started = [  # newest first, as read
        row("ann", 1, "Running", 900.0, None),
        row("bob", 2, "Completed", 500.0, 800.0),
        row("ann", 1, "Failed", 700.0, 750.0),
        row("ann", 1, "Completed", 100.0, 400.0),
    ]
    history = queue_snapshots._history(started)
    assert history == {None: [300.0, 300.0], 2: [300.0], 1: [300.0]}  # completed runs only
    config = FairShareConfig((TeamShare("x", 1.0), TeamShare("y", 1.0)), {"ann": "x", "bob": "y"})
    pace = queue_snapshots._pace(started, config, 1000.0)
    assert pace.pool == [100.0, 500.0, 700.0, 900.0]  # every start, running and ended, sorted
    assert pace.teams == {"x": [100.0, 700.0, 900.0], "y": [500.0]} and pace.now == 1000.0
    assert queue_snapshots._pace(started, None, 1000.0).teams == {}
