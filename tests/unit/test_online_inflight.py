"""The in-flight board of ``--workers N`` (control/online_inflight.py): each worker writes its row,
every worker reads the sum of the column."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudlet.control.online_inflight import SLOTS, InFlightBoard, board_path


def test_every_worker_sees_the_sum_of_every_workers_counts(tmp_path: Path) -> None:
    path = board_path(tmp_path)
    first, second = InFlightBoard(path, 0, 2), InFlightBoard(path, 1, 2)
    first.add(7, 1)
    first.add(7, 1)
    second.add(7, 1)
    second.add(8, 1)
    assert first.total(7) == second.total(7) == 3
    assert first.total(8) == 1 and first.total(9) == 0
    first.add(7, -2)
    assert second.total(7) == 1
    first.close()
    second.close()


def test_a_restarted_worker_starts_from_zero_and_keeps_the_others(tmp_path: Path) -> None:
    path = board_path(tmp_path)
    first, second = InFlightBoard(path, 0, 2), InFlightBoard(path, 1, 2)
    first.add(3, 5)
    second.add(3, 2)
    second.close()
    again = InFlightBoard(path, 1, 2)  # worker 1 restarted: what it had in flight is gone
    assert again.total(3) == 5
    first.close()
    again.close()


def test_deployments_in_one_cell_count_together(tmp_path: Path) -> None:
    board = InFlightBoard(board_path(tmp_path), 0, 1)
    board.add(5, 1)
    assert board.total(5 + SLOTS) == 1  # too many, never too few: a 429 early, not one over the bound
    board.close()


def test_a_slot_outside_the_workers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="slot 2"):
        InFlightBoard(board_path(tmp_path), 2, 2)
