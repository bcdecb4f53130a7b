"""A job's resource samples, kept downsampled, and the idle rules read from them (pure).

Samples are folded into fixed-width buckets; each level holds a bounded number of buckets, and
when a level overflows its oldest buckets are merged into the next, coarser level. So a job of a
week (or a year) stays bounded in rows: at most ``sum(capacity)`` buckets per job and node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

# (bucket width in seconds, buckets kept at that level): 15 min at 10 s, 2 h at 1 min,
# 1 day at 10 min, 1 week at 1 h, then a year at 1 day; the oldest daily buckets are dropped.
LEVELS: tuple[tuple[int, int], ...] = ((10, 90), (60, 120), (600, 144), (3600, 168), (86400, 366))
MAX_BUCKETS_PER_NODE = sum(capacity for _, capacity in LEVELS)

# Averaged over the samples of a bucket (weighted by their count); the others keep their maximum.
MEAN_FIELDS = ("cpu_percent", "read_bps", "write_bps", "net_rx_bps", "net_tx_bps", "gpu_percent")
MAX_FIELDS = ("memory_bytes", "disk_used_bytes", "gpu_memory_bytes", "gpu_count")
FIELDS = MEAN_FIELDS + MAX_FIELDS


@dataclass(frozen=True)
class Bucket:
    """The samples of one job on one node within [start, start + width): ``n`` samples' means/maxima.
    A field is None when no sample of the bucket had it (a node without a GPU has no GPU fields)."""

    node_id: str
    level: int
    start: float
    n: int
    values: dict[str, float | None]


def bucket_start(at: float, level: int) -> float:
    width = LEVELS[level][0]
    return float(int(at // width) * width)


def merge(a: Bucket, b: Bucket, level: int) -> Bucket:
    """One bucket of `level` holding both (their start is the level's bucket of the earlier one)."""
    values: dict[str, float | None] = {}
    total = a.n + b.n
    for name in FIELDS:
        x, y = a.values.get(name), b.values.get(name)
        if x is None or y is None:
            values[name] = x if y is None else y
        elif name in MEAN_FIELDS:
            values[name] = (x * a.n + y * b.n) / total
        else:
            values[name] = max(x, y)
    return Bucket(a.node_id, level, bucket_start(min(a.start, b.start), level), total, values)


def add_sample(
    buckets: dict[float, Bucket], node_id: str, at: float, values: dict[str, float | None]
) -> Bucket:
    """The level-0 bucket after one more sample (buckets: the level-0 buckets by start)."""
    start = bucket_start(at, 0)
    sample = Bucket(node_id, 0, start, 1, {k: values.get(k) for k in FIELDS})
    held = buckets.get(start)
    return sample if held is None else merge(held, sample, 0)


def compact(buckets: Sequence[Bucket], only: set[int] | None = None) -> tuple[list[Bucket], list[Bucket]]:
    """Given the buckets of one job and node: (buckets to drop, buckets to write) so that every level
    (of `only`, if given: then `buckets` must hold those levels and the next) is within its capacity.
    Overflowing buckets move (merged) into the next level; the last level's oldest are dropped."""
    by_level: dict[int, dict[float, Bucket]] = {}
    for b in buckets:
        by_level.setdefault(b.level, {})[b.start] = b
    drop: list[Bucket] = []
    write: dict[tuple[int, float], Bucket] = {}
    for level, (_, capacity) in enumerate(LEVELS):
        held = by_level.get(level, {})
        if len(held) <= capacity or (only is not None and level not in only):
            continue
        oldest = sorted(held)[: len(held) - capacity]
        for start in oldest:
            old = held.pop(start)
            drop.append(old)
            write.pop((level, start), None)
            if level + 1 == len(LEVELS):
                continue
            coarser = by_level.setdefault(level + 1, {})
            target = bucket_start(start, level + 1)
            moved = replace(old, level=level + 1, start=target)
            merged = moved if target not in coarser else merge(coarser[target], moved, level + 1)
            coarser[target] = merged
            write[(level + 1, target)] = merged
    return drop, list(write.values())


def series(buckets: Iterable[Bucket]) -> list[Bucket]:
    """Buckets in time order, coarse history first (levels never overlap in time: older data is
    only ever moved to coarser levels)."""
    return sorted(buckets, key=lambda b: (b.start, -b.level))


@dataclass(frozen=True)
class IdleRule:
    """A resource is idle when every sample of the last `window_s` is under `threshold_percent` and
    the samples cover the window (a job younger than the window is not yet idle)."""

    threshold_percent: float
    window_s: float


GPU_IDLE = IdleRule(threshold_percent=5.0, window_s=30 * 60)
CPU_IDLE = IdleRule(threshold_percent=2.0, window_s=60)


def idle(points: Sequence[tuple[float, float | None]], rule: IdleRule, now: float) -> bool:
    """points: (time, percent or None when not measured), any order. True when the window is
    covered and every measured point in it is below the threshold; None points (no GPU) never
    make a resource idle."""
    since = now - rule.window_s
    recent = [(t, v) for t, v in points if t >= since - LEVELS[0][0]]
    if not recent or any(v is None for _, v in recent):
        return False
    # Covered: a bucket near the window's start (older data sits in 1-minute buckets) and a recent
    # one (samples that stopped say nothing about now).
    slack = min(LEVELS[1][0], rule.window_s / 4)
    if min(t for t, _ in recent) > since + slack or max(t for t, _ in recent) < now - 3 * LEVELS[0][0]:
        return False
    return all(v is not None and v < rule.threshold_percent for _, v in recent)


GPU_IDLE_WARNING = "GPU idle: utilisation under {threshold:g} % for {minutes:g} min"


def gpu_idle_warning(rule: IdleRule = GPU_IDLE) -> str:
    return GPU_IDLE_WARNING.format(threshold=rule.threshold_percent, minutes=rule.window_s / 60)


def gpu_hours(points: Sequence[tuple[float, float, int]]) -> tuple[float, float]:
    """points: (seconds covered, mean GPU %, GPUs) per bucket. (GPU-hours held, idle GPU-hours):
    a bucket whose mean utilisation is under the GPU idle threshold counts as idle."""
    held = sum(s * g for s, _, g in points) / 3600
    wasted = sum(s * g for s, u, g in points if u < GPU_IDLE.threshold_percent) / 3600
    return held, wasted
