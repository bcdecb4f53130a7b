"""A job's Monitoring tab in Chromium (issue 29 item 2): a running job's CPU and memory charts
drawn from its agent's samples and growing as more arrive over the tab's event stream (the page
reads no monitoring JSON), a node without a GPU says so and has no GPU chart; axe-core clean; the
job's hostile display name stays text (the page fixture fails on any console error)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import studio_helpers
from tests.browser.studio_helpers import axe_check, screenshot, sign_in
from tests.conftest import RunningServer
from tests.jobs_helpers import served, submit

browser, page = studio_helpers.browser, studio_helpers.page
HOSTILE = "<img src=x onerror=console.error(1)></script><script>console.error(2)</script>"
# ~200 MiB held, one core busy for a while, then asleep: charts with a shape.
COMMAND = (
    "python -c \"import time; held = bytearray(b'x') * (200 << 20); end = time.time() + 8; "
    'any(time.time() > end for _ in iter(int, 1)); time.sleep(60)"'
)


@pytest.fixture(scope="module")
def studio_srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-monitoring", extra_env={"CLOUDLET_MONITOR_INTERVAL_S": "1"})


@pytest.fixture(scope="module")
def running_job(studio_srv: RunningServer) -> Iterator[str]:
    with studio_srv.client() as api:
        submit(
            api,
            studio_srv,
            "monitored-job",
            {"command": COMMAND, "compute": "local", "display_name": HOSTILE},
        )
        yield "monitored-job"
        api.post(f"{studio_srv.ws_path}/jobs/monitored-job/cancel")


def test_the_monitoring_tab_charts_a_running_job(
    studio_srv: RunningServer, running_job: str, page: Any
) -> None:
    sign_in(page, studio_srv)
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    url = f"{studio_srv.endpoint}/studio/ws/{studio_srv.subscription_id}/default/default/jobs/{running_job}"
    page.goto(url + "?tab=monitoring")
    assert page.get_by_role("link", name="Monitoring").get_attribute("aria-current") == "page"
    page.locator("figure.chart[data-key='memory_bytes'] canvas").wait_for(timeout=60_000)
    page.locator("figure.chart[data-key='cpu_percent'] canvas").wait_for()
    page.locator("h3.node-title", has_text="no GPU").wait_for()
    assert page.locator("figure.chart[data-key='gpu_percent']").count() == 0  # no GPU: no chart, not zeros
    assert page.get_by_role("heading", level=1).inner_text() == HOSTILE
    # More samples arrive over the stream (a sample a second, sent with the agent's long polls, up
    # to 20 s apart): the chart grows, nothing is fetched.
    cpu = page.locator("figure.chart[data-key='cpu_percent']")
    drawn = int(cpu.get_attribute("data-samples") or 0)
    page.wait_for_function(
        "n => Number(document.querySelector(\"figure.chart[data-key='cpu_percent']\").dataset.samples)"
        " > n + 2",
        arg=drawn,
        timeout=45_000,
    )
    page.wait_for_function(
        "document.querySelectorAll('#monitoring-nodes figure.chart').length >= 4", timeout=30_000
    )
    assert [u for u in requested if u.endswith("/monitoring/live")] == [url + "/monitoring/live"], requested
    assert not [u for u in requested if "monitoring.json" in u], requested
    screenshot(page, "job-monitoring")
    axe_check(page)
