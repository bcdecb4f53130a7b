"""Requests in flight per online deployment, counted across the workers of ``cloudlet server
--workers N`` (issue 14): Azure's 429 bound (2 × ``max_concurrent_requests_per_instance`` × ready
replicas in flight) and the autoscaler's in-flight target are about the deployment, not about the
share of its callers one worker's gateway happens to hold.

The board is a file in the server's home (``online/inflight``), mapped by every worker: one row
per worker of ``SLOTS`` 64-bit counters, a deployment's counter at ``id mod SLOTS``. A worker
writes only its own row (one writer per cell, an aligned 8-byte store: no lock, nothing torn) and
reads the column of every row. Two deployments whose ids share a cell add up (a count too high
by the other's requests: a 429 early, never a request let through over the bound). Between a
worker's check and its increment another worker may admit one more, so the bound can be passed by
at most N - 1 requests. A worker zeroes its row when it starts (what a killed worker had in flight
is gone with it); the supervisor removes the file before any worker starts, so rows of a run with
more workers are never read.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

SLOTS = 4096
CELL = 8  # bytes: one signed 64-bit count


def board_path(home: Path) -> Path:
    return home / "online" / "inflight"


class InFlightBoard:
    def __init__(self, path: Path, slot: int, workers: int) -> None:
        if not 0 <= slot < workers:
            raise ValueError(f"worker slot {slot} is not one of {workers} workers")
        self.slot, self.workers = slot, workers
        size = workers * SLOTS * CELL
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)  # every worker asks for the same size: idempotent
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._cells = memoryview(self._map).cast("q")
        start = slot * SLOTS
        self._cells[start : start + SLOTS] = memoryview(bytes(SLOTS * CELL)).cast("q")

    def add(self, deployment_id: int, delta: int) -> None:
        self._cells[self.slot * SLOTS + deployment_id % SLOTS] += delta

    def total(self, deployment_id: int) -> int:
        column = deployment_id % SLOTS
        return sum(self._cells[row * SLOTS + column] for row in range(self.workers))

    def close(self) -> None:
        self._cells.release()
        self._map.close()
