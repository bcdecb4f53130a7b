"""Summary statistics for latency samples."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of an already sorted, non-empty sequence."""
    if not sorted_values:
        return math.nan
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    frac = pos - low
    return float(sorted_values[low]) * (1 - frac) + float(sorted_values[high]) * frac


def summarize_ns(latencies_ns: Sequence[int], wall_s: float | None = None) -> dict[str, Any]:
    """Latency summary in milliseconds; with WALL_S also throughput in requests per second."""
    ms = sorted(value / 1e6 for value in latencies_ns)
    out: dict[str, Any] = {
        "count": len(ms),
        "p50_ms": round(percentile(ms, 50), 4),
        "p90_ms": round(percentile(ms, 90), 4),
        "p99_ms": round(percentile(ms, 99), 4),
        "p999_ms": round(percentile(ms, 99.9), 4),
        "min_ms": round(ms[0], 4) if ms else math.nan,
        "max_ms": round(ms[-1], 4) if ms else math.nan,
        "mean_ms": round(sum(ms) / len(ms), 4) if ms else math.nan,
    }
    if wall_s is not None:
        out["wall_s"] = round(wall_s, 4)
        out["throughput_rps"] = round(len(ms) / wall_s, 1) if wall_s > 0 else math.nan
    return out


def ratio(numerator: float, denominator: float) -> float:
    if not denominator or math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    return round(numerator / denominator, 3)
