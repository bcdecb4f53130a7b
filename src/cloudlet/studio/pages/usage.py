"""Usage and cost (issue 28 item 6): per compute and per user, node-hours, idle node-hours,
disk-hours and cost by UTC day, as a stacked chart (uPlot) and tables, and the same rows as CSV
(``…/usage.csv``, same query). The numbers are ``services/compute/usage.workspace_usage``'s."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse, Response

from cloudlet.api.deps import Context, context
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import usage as usage_service
from cloudlet.services.compute.usage import Usage
from cloudlet.studio import shell
from cloudlet.studio.session import PREFIX, StudioRoute

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
NAV = shell.NavItem("usage", "Usage", "usage", "usage")
WS = "/ws/{sub}/{rg}/{ws}/usage"
WINDOWS = (7, 30, 90)  # days
GROUPINGS = {"compute": "Compute", "user": "User"}
CHART_GROUPS = 6  # the biggest spenders drawn each; the rest stacked as "other"


def _window(days: int) -> int:
    return days if days in WINDOWS else 30


def _read(ctx: Context, sub: str, rg: str, ws: str, days: int) -> tuple[Any, Usage]:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    catalogue = catalogue_service.current(ctx.session)
    return (workspace, ref), usage_service.workspace_usage(ctx.session, ctx.caller, ref, days, catalogue)


def chart_data(found: Usage, by: str) -> dict[str, Any]:
    """Cost per day of the biggest spenders (and "other"), for the page's stacked chart."""
    ranked = found.by_compute if by == "compute" else found.by_user
    names = [t.name for t in ranked[:CHART_GROUPS]]
    index = {day: i for i, day in enumerate(found.days)}
    series: dict[str, list[float]] = {name: [0.0] * len(found.days) for name in names}
    for row in found.rows:
        name = row.compute if by == "compute" else row.user
        column = series[name] if name in series else series.setdefault("other", [0.0] * len(found.days))
        column[index[row.day]] += row.cost
    return {
        "days": [int(found.since + i * usage_service.DAY_S) for i in range(len(found.days))],
        "series": [{"name": n, "cost": [round(v, 4) for v in values]} for n, values in series.items()],
    }


@router.get(WS)
def usage_page(
    sub: str, rg: str, ws: str, days: int = 30, by: str = "compute", ctx: Context = Depends(context)
) -> HTMLResponse:
    days, by = _window(days), by if by in GROUPINGS else "compute"
    (workspace, ref), found = _read(ctx, sub, rg, ws, days)
    return shell.render(
        ctx,
        "usage.html",
        ref,
        workspace,
        active=NAV.key,
        usage=found,
        days=days,
        by=by,
        windows=WINDOWS,
        groupings=GROUPINGS,
        chart=chart_data(found, by),
        totals=found.by_compute if by == "compute" else found.by_user,
    )


CSV_COLUMNS = ("day", "compute", "user", "node_hours", "idle_node_hours", "disk_hours", "cost_usd")


@router.get(WS + ".csv")
def usage_csv(sub: str, rg: str, ws: str, days: int = 30, ctx: Context = Depends(context)) -> Response:
    """The page's rows, one per day, compute and user."""
    days = _window(days)
    _, found = _read(ctx, sub, rg, ws, days)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for r in found.rows:
        writer.writerow(
            [
                r.day.isoformat(),
                _cell(r.compute),
                _cell(r.user),
                f"{r.node_hours:.6f}",
                f"{r.idle_node_hours:.6f}",
                f"{r.disk_hours:.6f}",
                f"{r.cost:.6f}",
            ]
        )
    name = f"usage-{re.sub(r'[^A-Za-z0-9_.-]', '_', ws)}-{days}d.csv"
    headers = {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8", headers=headers)


def _cell(text: str) -> str:
    """A spreadsheet would run a cell starting with = + - @ as a formula: quote it as text."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text
