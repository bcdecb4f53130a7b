"""The usage arithmetic (``domain/compute/usage.py``) on hand-made intervals: node-hours cut at UTC
midnights, idle time between and after jobs, overlapping jobs counted once, disk-hours for a
stopped instance, the window, costs and the biggest spenders."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from cloudlet.domain.compute.usage import BusySpan, DiskSpan, NodeSpan, day_pieces, totals, usage_by_day

H = 3600.0
DAY1 = datetime(2026, 12, 1, tzinfo=UTC).timestamp()  # midnight UTC
D1, D2 = date(2026, 12, 1), date(2026, 12, 2)
EVER = (0.0, 1e12)


def _by_key(rows: list) -> dict:  # type: ignore[type-arg]
    return {(r.day, r.compute, r.user): r for r in rows}


def test_a_span_is_cut_at_utc_midnight() -> None:
    assert day_pieces(DAY1 + 22 * H, DAY1 + 26 * H) == [(D1, 2 * H), (D2, 2 * H)]
    assert day_pieces(DAY1, DAY1) == []


def test_a_cluster_node_with_a_job_then_an_idle_tail() -> None:
    node = NodeSpan("n1", "cpu", "creator", 2.0, DAY1 + 1 * H, DAY1 + 5 * H)
    job = BusySpan("n1", "alice", DAY1 + 2 * H, DAY1 + 4 * H)
    rows = _by_key(usage_by_day([node], [job], [], *EVER))
    alice, creator = rows[(D1, "cpu", "alice")], rows[(D1, "cpu", "creator")]
    assert (alice.node_hours, alice.idle_node_hours, alice.cost) == (2.0, 0.0, 4.0)
    # Idle before the job (1 h) and after it (1 h): the cluster creator's.
    assert (creator.node_hours, creator.idle_node_hours, creator.cost) == (2.0, 2.0, 4.0)


def test_overlapping_jobs_count_each_hour_once() -> None:
    node = NodeSpan("n1", "ci", "owner", 1.0, DAY1, DAY1 + 4 * H)
    jobs = [BusySpan("n1", "a", DAY1, DAY1 + 3 * H), BusySpan("n1", "b", DAY1 + 1 * H, DAY1 + 4 * H)]
    rows = _by_key(usage_by_day([node], jobs, [], *EVER))
    assert rows[(D1, "ci", "a")].node_hours == 3.0
    assert rows[(D1, "ci", "b")].node_hours == 1.0
    assert sum(r.node_hours for r in rows.values()) == 4.0
    assert all(r.idle_node_hours == 0 for r in rows.values())


def test_a_node_and_its_job_across_midnight() -> None:
    node = NodeSpan("n1", "cpu", "creator", 1.0, DAY1 + 23 * H, DAY1 + 26 * H)
    job = BusySpan("n1", "alice", DAY1 + 23.5 * H, DAY1 + 25 * H)
    rows = _by_key(usage_by_day([node], [job], [], *EVER))
    assert rows[(D1, "cpu", "alice")].node_hours == pytest.approx(0.5)
    assert rows[(D2, "cpu", "alice")].node_hours == pytest.approx(1.0)
    assert rows[(D1, "cpu", "creator")].idle_node_hours == pytest.approx(0.5)
    assert rows[(D2, "cpu", "creator")].idle_node_hours == pytest.approx(1.0)


def test_a_stopped_instance_still_accrues_disk_hours() -> None:
    # The machine ran 2 h; the disk exists all day (T10).
    node = NodeSpan("n9", "ci", "bob", 0.5, DAY1, DAY1 + 2 * H)
    disk = DiskSpan("ci", "bob", 0.01, DAY1, DAY1 + 24 * H)
    (row,) = usage_by_day([node], [], [disk], *EVER)
    assert (row.node_hours, row.idle_node_hours, row.disk_hours) == (2.0, 2.0, 24.0)
    assert row.cost == pytest.approx(2 * 0.5 + 24 * 0.01)


def test_the_window_clips_every_span() -> None:
    node = NodeSpan("n1", "cpu", "creator", 1.0, DAY1, DAY1 + 48 * H)
    job = BusySpan("n1", "alice", DAY1 + 20 * H, DAY1 + 30 * H)
    disk = DiskSpan("ci", "bob", 1.0, DAY1 - 100 * H, DAY1 + 100 * H)
    rows = usage_by_day([node], [job], [disk], DAY1 + 24 * H, DAY1 + 36 * H)
    assert {r.day for r in rows} == {D2}
    got = _by_key(rows)
    assert got[(D2, "cpu", "alice")].node_hours == pytest.approx(6.0)
    assert got[(D2, "cpu", "creator")].idle_node_hours == pytest.approx(6.0)
    assert got[(D2, "ci", "bob")].disk_hours == pytest.approx(12.0)


def test_biggest_spenders_first() -> None:
    nodes = [
        NodeSpan("n1", "big", "x", 10.0, DAY1, DAY1 + H),
        NodeSpan("n2", "small", "y", 1.0, DAY1, DAY1 + 3 * H),
    ]
    rows = usage_by_day(nodes, [], [], *EVER)
    assert [t.name for t in totals(rows, "compute")] == ["big", "small"]
    assert [(t.name, t.node_hours) for t in totals(rows, "user")] == [("x", 1.0), ("y", 3.0)]
