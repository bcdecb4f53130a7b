"""Online endpoints in Chromium (issue 28 item 1), walked as a new user would from sign-in: create an
endpoint from the form, add two deployments (blue, green) from YAML with their code and model folders
uploaded as archives, send a request from the Test tab and read the answer, move the traffic to
70/30 with the sliders and see 100 requests split accordingly, regenerate the primary key and see the
old one refused and the new one accepted, read the logs and the monitoring charts; then a Reader sees
no write control and a hand-posted form is refused. Hostile descriptions, tags, answers and log
lines are shown as text (the page fixture fails on any console error); axe-core on each tab."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.browser import studio_helpers
from tests.browser.studio_helpers import (
    axe_check,
    confirm,
    expect_failed_load,
    requests_after_load,
    screenshot,
    sign_in,
    ws_url,
)
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import served_for_inference, wait_until
from tests.online_helpers import HOSTILE, REQUEST, code_zip, deployment_yaml, model_zip

browser, page = studio_helpers.browser, studio_helpers.page
pytestmark = pytest.mark.timeout(600)
EP = "walk-ep"
SPLIT_REQUESTS = 100
BLUE_SHARE = 0.7


@pytest.fixture(scope="module")
def studio_srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served_for_inference(tmp_path_factory, "studio-online-browser")


def tab(page: Any, srv: RunningServer, name: str) -> None:
    page.goto(ws_url(srv, "endpoints", EP) + f"?tab={name}")


def rest(srv: RunningServer, path: str = "") -> dict[str, Any]:
    with srv.client() as api:
        found: dict[str, Any] = api.get(f"{srv.ws_path}/onlineEndpoints/{EP}{path}").json()
        return found


def add_deployment(page: Any, srv: RunningServer, name: str) -> None:
    """The deployment form: its YAML loaded from a file, the code and model archives uploaded."""
    page.goto(ws_url(srv, "endpoints", EP))
    page.get_by_role("link", name="+ Add deployment").click()
    page.wait_for_url("**/deployments/_new")
    editor = page.get_by_role("textbox", name="Deployment YAML")
    editor.wait_for()
    text = deployment_yaml(EP, name, name).encode()
    page.get_by_label("YAML file").set_input_files(
        files=[{"name": f"{name}.yml", "mimeType": "text/yaml", "buffer": text}]
    )
    editor.get_by_text(f"name: {name}").wait_for()
    for label, data, into in (
        ("Code folder archive", code_zip(), "code"),
        ("Model folder archive", model_zip(), "model"),
    ):
        page.get_by_label(label).set_input_files(
            files=[{"name": f"{into}.zip", "mimeType": "application/zip", "buffer": data}]
        )
        page.locator(f"#{into}-help").get_by_text("Uploaded").wait_for()
    axe_check(page)
    if name == "blue":
        screenshot(page, "endpoint-deploy")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(f"**/endpoints/{EP}")


def settled(srv: RunningServer, name: str) -> None:
    wait_until(
        lambda: rest(srv, f"/deployments/{name}")["provisioning_state"] in ("Succeeded", "Failed"),
        timeout=300,
        what=f"{name} to settle",
        interval=0.5,
    )
    shown = rest(srv, f"/deployments/{name}")
    assert shown["provisioning_state"] == "Succeeded", shown


def test_create_deploy_test_split_traffic_and_regenerate_a_key(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    sign_in(page, srv)
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Endpoints").click()
    page.wait_for_url("**/endpoints")
    axe_check(page)
    # -- an endpoint from the form (a hostile description)
    page.get_by_role("link", name="+ New endpoint").click()
    page.get_by_label("Name").fill(EP)
    page.get_by_label("Description").fill(HOSTILE)
    axe_check(page)
    screenshot(page, "endpoint-new")
    page.get_by_role("button", name="Create").click()
    page.wait_for_url(f"**/endpoints/{EP}")
    assert page.locator("#endpoint-description").inner_text() == HOSTILE
    # -- two deployments from YAML, served for real
    add_deployment(page, srv, "blue")
    add_deployment(page, srv, "green")
    settled(srv, "blue")
    settled(srv, "green")
    page.reload()
    rows = page.locator("#deployment-table tbody tr")
    assert rows.count() == 2
    assert rows.first.get_by_text("Succeeded").is_visible()
    assert HOSTILE in page.locator("#deployment-table").inner_text()  # tags and description, as text
    axe_check(page)
    screenshot(page, "endpoint-details")

    # -- the Test tab: a request pinned to blue, then a hostile answer shown as text
    tab(page, srv, "test")
    page.get_by_role("textbox", name="Request body (JSON)").wait_for()
    page.get_by_label("Deployment", exact=True).select_option("blue")
    page.get_by_role("button", name="Send").click()
    assert page.locator("#result-status").inner_text() == "200"
    assert '"who": "blue"' in page.locator("#result-body").inner_text()
    assert float(page.locator("#result-latency").inner_text()) > 0
    axe_check(page)
    screenshot(page, "endpoint-test")
    editor = page.get_by_role("textbox", name="Request body (JSON)")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text('{"data": "hostile"}')
    page.get_by_role("button", name="Send").click()
    page.locator("#result-body").get_by_text("onerror").wait_for()
    assert HOSTILE in page.locator("#result-body").inner_text()

    # -- traffic 70/30 with the sliders: Save only once they add up to 100
    tab(page, srv, "traffic")
    save = page.get_by_role("button", name="Save")
    assert save.is_enabled()  # no traffic at all (0) is a valid split
    page.get_by_label("Traffic for blue (slider)").focus()  # the keyboard moves a slider
    page.keyboard.press("ArrowRight")
    assert page.get_by_label("Traffic % for blue").input_value() == "1"
    assert save.is_disabled()
    page.get_by_label("Traffic for blue (slider)").fill("70")
    assert page.locator("#traffic-total").inner_text() == "70"
    assert save.is_disabled()
    page.get_by_label("Traffic % for green").fill("30")
    assert page.get_by_label("Traffic for green (slider)").input_value() == "30"
    assert save.is_enabled()
    page.get_by_label("Mirror % for green").fill("10")  # green takes live traffic: no mirror
    assert save.is_disabled()
    page.get_by_label("Mirror % for green").fill("0")
    axe_check(page)
    screenshot(page, "endpoint-traffic")
    save.click()
    page.locator("#traffic-saved").wait_for()
    assert rest(srv)["traffic"] == {"blue": 70, "green": 30}

    # -- the key, shown on request; 100 requests split by the weights (a binomial tolerance)
    tab(page, srv, "consume")
    assert page.locator("#primary-key").count() == 0
    assert "<your-key>" in page.locator("#snippet-curl").inner_text()
    page.get_by_role("button", name="Show keys").click()
    old_key = page.locator("#primary-key").inner_text()
    uri = page.locator("#consume-uri").inner_text()
    seen: Counter[str] = Counter()
    with httpx.Client(timeout=30, trust_env=False) as http:
        for _ in range(SPLIT_REQUESTS):
            answer = http.post(uri, json=REQUEST, headers={"Authorization": f"Bearer {old_key}"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["who"] == answer.headers["azureml-model-deployment"]
            seen[answer.headers["azureml-model-deployment"]] += 1
    spread = 4 * math.sqrt(SPLIT_REQUESTS * BLUE_SHARE * (1 - BLUE_SHARE))  # ± 4 sd: 1 in 15,000 fails
    assert abs(seen["blue"] - SPLIT_REQUESTS * BLUE_SHARE) <= spread, seen
    assert seen["blue"] + seen["green"] == SPLIT_REQUESTS, seen
    axe_check(page)
    screenshot(page, "endpoint-consume")

    # -- regenerate the primary key in the studio: the old one refused, the new one accepted
    page.get_by_role("button", name="Regenerate primary key").click()
    confirm(page, "Regenerate")
    page.locator("#regenerated").wait_for()

    def status_with(key: str) -> int:
        return httpx.post(
            uri, json=REQUEST, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ).status_code

    wait_until(lambda: status_with(old_key) == 401, timeout=10, what="the old key refused")
    page.get_by_role("button", name="Show keys").click()
    new_key = page.locator("#primary-key").inner_text()
    assert new_key != old_key
    assert status_with(new_key) == 200


def test_a_reader_sees_no_write_control_and_a_posted_form_is_refused(
    studio_srv: RunningServer, page: Any
) -> None:
    srv = studio_srv
    with srv.client() as api:
        key = new_user(api, srv, "endpoint-reader", "Reader")
    sign_in(page, srv, key)
    page.goto(ws_url(srv, "endpoints"))
    page.get_by_role("link", name=EP).click()
    assert page.get_by_role("link", name="+ Add deployment").count() == 0
    for name in ("details", "consume", "traffic", "test"):
        tab(page, srv, name)
        for control in ("Delete", "Save", "Show keys", "Send"):
            assert page.get_by_role("button", name=control).count() == 0, (name, control)
        assert page.get_by_role("button", name=re.compile("^Regenerate")).count() == 0
    assert page.get_by_role("link", name="+ New endpoint").count() == 0
    axe_check(page)
    token = page.locator("body").get_attribute("hx-headers") or ""
    csrf = re.search(r'"X-CSRF-Token":\s*"([^"]+)"', token)
    assert csrf is not None
    url = ws_url(srv, "endpoints", EP, "regenerate")
    expect_failed_load(page, url)
    refused = page.request.post(
        url, form={"csrf_token": csrf.group(1), "key_type": "Primary"}, max_redirects=0
    )
    assert refused.status == 403
    url = ws_url(srv, "endpoints", EP, "traffic")
    expect_failed_load(page, url)
    refused = page.request.post(
        url, form={"csrf_token": csrf.group(1), "traffic:blue": "100"}, max_redirects=0
    )
    assert refused.status == 403
    assert rest(srv)["traffic"] == {"blue": 70, "green": 30}


def test_the_logs_and_monitoring_tabs_are_live(studio_srv: RunningServer, page: Any) -> None:
    """The deployments the first test made: their log tail and counters come by server-sent event
    streams (a hostile line shown as text), and the page reads nothing again."""
    srv = studio_srv
    settled(srv, "blue")
    settled(srv, "green")
    with srv.client() as api:
        key = api.post(f"{srv.ws_path}/onlineEndpoints/{EP}/listKeys").json()["primaryKey"]
    uri = rest(srv)["scoring_uri"]
    auth = {"Authorization": f"Bearer {key}"}
    sign_in(page, srv)
    with httpx.Client(timeout=30, trust_env=False) as http:
        tab(page, srv, "logs")
        page.get_by_label("Deployment", exact=True).select_option("green")
        page.get_by_role("button", name="Show").click()
        page.locator("#log-text").get_by_text("init done").first.wait_for()
        assert HOSTILE in page.locator("#log-text").inner_text()
        # The log tail is live (a server-sent event stream): a line the server writes now shows, no reload.
        page.evaluate("document.getElementById('log-box').dataset.before = 'live'")
        requested = requests_after_load(page)
        boom = {"Authorization": f"Bearer {key}", "azureml-model-deployment": "green"}
        assert http.post(uri, json={"data": "boom"}, headers=boom).status_code >= 400
        page.locator("#log-text").get_by_text("boom").first.wait_for(timeout=15_000)
        assert page.evaluate("!document.getElementById('log-box').dataset.before")  # the box is a new one
        assert HOSTILE in page.locator("#log-text").inner_text()
        assert requested == [], requested  # nothing read again: the stream brought it
        axe_check(page)
        screenshot(page, "endpoint-logs")
        tab(page, srv, "monitoring")
        page.locator("#chart-requests canvas").wait_for()  # drawn after its second event
        requested = requests_after_load(page)
        before = int(
            page.locator("#metrics-table tr[data-deployment=blue] td[data-field=requests]").inner_text()
        )
        for _ in range(10):
            assert http.post(uri, json=REQUEST, headers=auth).status_code == 200
        wait_until(
            lambda: (
                int(
                    page.locator(
                        "#metrics-table tr[data-deployment=blue] td[data-field=requests]"
                    ).inner_text()
                )
                > before
            ),
            timeout=15,
            what="the table to count the new requests",
        )
        for _ in range(10):
            assert http.post(uri, json=REQUEST, headers=auth).status_code == 200
        p95 = page.locator("#metrics-table tr[data-deployment=blue] [data-field=p95_ms]")
        wait_until(lambda: p95.inner_text() not in ("—", ""), timeout=15, what="an interval's p95")
        assert float(p95.inner_text()) > 0
        assert requested == [], requested  # the counters came by the stream: metrics.json is not polled
        axe_check(page)
        screenshot(page, "endpoint-monitoring")
