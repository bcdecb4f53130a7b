"""Downsampling and idle rules of job resource samples (domain/jobs/resource_samples.py), with
synthetic samples."""

from __future__ import annotations

from cloudlet.domain.jobs import resource_samples as rs
from cloudlet.domain.jobs.resource_samples import Bucket, IdleRule


def _ingest(seconds: int, step: int, gpu: float | None = None) -> list[Bucket]:
    """A job sampled every `step` s for `seconds`, folded and compacted as the service does."""
    held: dict[tuple[int, float], Bucket] = {}
    for at in range(0, seconds, step):
        level0 = {b.start: b for (lvl, _), b in held.items() if lvl == 0}
        b = rs.add_sample(
            level0, "n1", float(at), {"cpu_percent": 100.0, "memory_bytes": at, "gpu_percent": gpu}
        )
        held[(0, b.start)] = b
        if sum(1 for lvl, _ in held if lvl == 0) > rs.LEVELS[0][1]:
            drop, write = rs.compact(list(held.values()))
            for d in drop:
                del held[(d.level, d.start)]
            for w in write:
                held[(w.level, w.start)] = w
    return list(held.values())


def test_a_bucket_averages_cpu_and_keeps_the_memory_maximum() -> None:
    a = rs.add_sample({}, "n", 100.0, {"cpu_percent": 50.0, "memory_bytes": 10.0})
    b = rs.add_sample({a.start: a}, "n", 105.0, {"cpu_percent": 100.0, "memory_bytes": 5.0})
    assert (b.n, b.values["cpu_percent"], b.values["memory_bytes"]) == (2, 75.0, 10.0)
    assert b.values["gpu_percent"] is None  # no GPU: none, not zero


def test_a_week_long_job_stays_bounded_and_keeps_its_history() -> None:
    buckets = _ingest(7 * 24 * 3600, 5)
    assert len(buckets) <= rs.MAX_BUCKETS_PER_NODE
    assert len(buckets) < 600
    ordered = rs.series(buckets)
    assert ordered[0].start == 0.0  # the first hour is still there, coarsely
    assert sum(b.n for b in buckets) == 7 * 24 * 3600 // 5  # every sample counted once
    assert all(abs((b.values["cpu_percent"] or 0) - 100.0) < 1e-9 for b in buckets)
    starts = [(b.level, b.start) for b in buckets]
    assert len(starts) == len(set(starts))


def test_an_hour_long_job_keeps_recent_detail() -> None:
    buckets = _ingest(3600, 5)
    level0 = [b for b in buckets if b.level == 0]
    assert len(level0) == rs.LEVELS[0][1]
    assert max(b.start for b in level0) == 3590.0


def test_gpu_idle_needs_the_whole_window_under_the_threshold() -> None:
    rule = IdleRule(threshold_percent=5.0, window_s=600)
    low = [(float(t), 1.0) for t in range(0, 700, 10)]
    assert rs.idle(low, rule, now=690.0)
    assert not rs.idle(low[:30], rule, now=290.0 + 600)  # samples stop: window not covered
    young = [(float(t), 1.0) for t in range(400, 700, 10)]
    assert not rs.idle(young, rule, now=690.0)  # younger than the window
    busy = [*low[:-1], (690.0, 50.0)]
    assert not rs.idle(busy, rule, now=690.0)
    assert not rs.idle([(float(t), None) for t in range(0, 700, 10)], rule, now=690.0)  # no GPU


def test_cpu_idle_and_gpu_hours() -> None:
    sleeping = [(float(t), 0.1) for t in range(0, 120, 10)]
    assert rs.idle(sleeping, rs.CPU_IDLE, now=110.0)
    assert not rs.idle([(float(t), 99.0) for t in range(0, 120, 10)], rs.CPU_IDLE, now=110.0)
    held, wasted = rs.gpu_hours([(3600, 80.0, 2), (1800, 1.0, 2)])
    assert (held, wasted) == (3.0, 1.0)
    assert "5 %" in rs.gpu_idle_warning() and "30 min" in rs.gpu_idle_warning()
