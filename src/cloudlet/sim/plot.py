"""A what-if plot (PNG): nodes held and jobs queued over time, one line per setting."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from cloudlet.sim.engine import SeriesPoint
from cloudlet.sim.whatif import Outcome

MAX_POINTS = 3000  # per line: more is invisible at this size and slow to draw


def _thin(points: Sequence[SeriesPoint], span: float) -> list[SeriesPoint]:
    """At most MAX_POINTS points, keeping each time bucket's peak (the plot should show peaks)."""
    if len(points) <= MAX_POINTS or span <= 0:
        return list(points)
    width = span / MAX_POINTS
    out: list[SeriesPoint] = []
    bucket = -1
    for point in points:
        b = int(point[0] // width)
        if b != bucket or not out:
            out.append(point)
            bucket = b
        else:
            last = out[-1]
            out[-1] = (last[0], max(last[1], point[1]), max(last[2], point[2]), max(last[3], point[3]))
    return out


def _duration(seconds: float) -> str:
    for limit, size, unit in ((120, 1, "s"), (7200, 60, "min"), (172800, 3600, "h")):
        if seconds < limit:
            return f"{seconds / size:.0f} {unit}" if unit == "s" else f"{seconds / size:.1f} {unit}"
    return f"{seconds / 86400:.1f} d"


def _unit(span_s: float) -> tuple[float, str]:
    if span_s >= 3 * 86400:
        return 86400.0, "days"
    if span_s >= 3 * 3600:
        return 3600.0, "hours"
    if span_s >= 180:
        return 60.0, "minutes"
    return 1.0, "seconds"


def write_plot(outcomes: Sequence[Outcome], path: str | Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    span = max((o.series[-1][0] for o in outcomes if o.series), default=0.0)
    scale, unit = _unit(span)
    fig, (nodes_ax, queue_ax) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, constrained_layout=True)
    for outcome in outcomes:
        points = _thin(outcome.series, span)
        times = [p[0] / scale for p in points]
        label = f"{outcome.setting.label}: ${outcome.cost:,.0f}, wait p95 {_duration(outcome.wait_p95_s)}"
        nodes_ax.step(times, [p[1] for p in points], where="post", label=label, linewidth=1)
        queue_ax.step(times, [p[2] for p in points], where="post", label=label, linewidth=1)
    nodes_ax.set_ylim(bottom=0, top=max((o.setting.max_nodes for o in outcomes), default=1) * 1.15)
    nodes_ax.set_ylabel("nodes held (billed)")
    nodes_ax.set_title(title)
    nodes_ax.legend(loc="upper left", fontsize="small")
    nodes_ax.grid(alpha=0.3)
    queue_ax.set_ylabel("jobs waiting in the queue")
    queue_ax.set_xlabel(f"time since the first submission ({unit})")
    queue_ax.grid(alpha=0.3)
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
