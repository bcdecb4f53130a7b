"""The usage page in Chromium (issue 28 item 6): after a cluster ran a job and scaled back down,
the stacked cost chart draws (uPlot, under the CSP), the biggest spenders table shows the compute
and the user, grouping by user is a GET the back button returns from, the CSV downloads, and
axe-core finds nothing serious."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from tests.browser import studio_helpers
from tests.browser.studio_helpers import axe_check, screenshot, sign_in
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import compute, create_compute, submit, wait_job, wait_until

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page


def test_the_usage_chart_tables_and_csv(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    with srv.client() as api:
        key = new_user(api, srv, "ursula", "Contributor")
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, "usage-cpu", {**body, "idle_time_before_scale_down": 2})
    with srv.client(key) as mine:
        submit(mine, srv, "usage-job", {"command": "sleep 3", "compute": "azureml:usage-cpu"})
        assert wait_job(mine, srv, "usage-job", timeout=120)["status"] == "Completed"
    with srv.client() as api:
        wait_until(lambda: compute(api, srv, "usage-cpu")["current_node_count"] == 0, 90, "the scale-down")

    sign_in(page, srv)
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Usage").click()
    page.wait_for_url("**/usage")
    chart = page.locator("#usage-chart")
    expect(chart).to_have_attribute("data-drawn", "1")
    expect(chart.locator("canvas")).to_have_count(1)
    expect(page.locator("#totals tr[data-name='usage-cpu'] .node-hours")).not_to_have_text("0.00")
    screenshot(page, "usage")
    axe_check(page)

    page.get_by_label("Group by").select_option("user")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**/usage?days=30&by=user")
    expect(page.locator("#totals tr[data-name='ursula'] .cost")).not_to_have_text("$0.00")
    page.go_back()
    page.wait_for_url("**/usage")

    with page.expect_download() as downloaded:
        page.get_by_role("link", name="Download CSV").click()
    text = Path(downloaded.value.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert any(
        r["compute"] == "usage-cpu" and r["user"] == "ursula" and float(r["node_hours"]) > 0 for r in rows
    )
