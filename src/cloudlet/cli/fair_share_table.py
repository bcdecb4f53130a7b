"""``cloudlet compute show``'s "Fair share" table: the pool view (``services/views/fair_share``) as
the REST route ``…/computes/{name}/fairShare`` answers it, one row per team (issue 31)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS = (
    "TEAM",
    "SHARE",
    "ENTITLED",
    "MAY BORROW",
    "HELD",
    "BORROWED",
    "USAGE (core-h)",
    "FACTOR",
    "QUEUED",
)


def _number(value: Any) -> str:
    return f"{float(value):g}" if value is not None else "—"


def _hours(value: float) -> str:
    return f"{value:.2f}" if value >= 1 or not value else f"{value:.2g}"  # a minute's use shows


def render(view: dict[str, Any]) -> str:
    """The table, and the pool's line under it (capacity, half-life, preemptions of the hour); ""
    where no team has a share of the pool."""
    teams = view.get("teams") or []
    if not teams:
        return ""
    table = Table(title="Fair share", show_header=True, header_style="bold", box=None, pad_edge=False)
    for column in COLUMNS:
        table.add_column(column, no_wrap=True)
    for team in teams:
        borrow = team.get("borrow_limit")
        table.add_row(
            str(team["team"]),
            f"{_number(team['share'])} ({team['share_percent']:g} %)",
            f"{_number(team['entitlement_cores'])} cores",
            "any idle" if borrow is None else ("never" if borrow == 0 else f"{_number(borrow)} cores"),
            _number(team["held_cores"]),
            _number(team["borrowed_cores"]),
            f"{_hours(team['usage_core_hours'])} ({team['usage_percent']:g} %)",
            f"{team['factor']:.3f}",
            str(team["queued_jobs"]),
        )
    console = Console(file=io.StringIO(), width=200, force_terminal=False)
    console.print(table)
    recent, cap = view.get("preemptions_last_hour"), view.get("preemptions_per_hour_cap")
    hours = float(view.get("half_life_s") or 0) / 3600
    line = f"pool: {view.get('capacity_cores')} cores; usage half-life {hours:g} h"
    if recent is not None:
        line += f"; preemptions in the last hour: {recent}" + (f" of {cap}" if cap is not None else "")
    text: str = console.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(row.rstrip() for row in text.splitlines()) + "\n" + line + "\n"
