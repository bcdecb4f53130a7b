"""A pipeline's full-page graph and a sweep's charts in Chromium (issue 28, item 4), walked as a
new user would: open the graph from the Child jobs tab, read the edges' port names, pan and zoom,
open a step's panel by keyboard and go to its logs; a rerun's reused step wears a "Reused" badge
linking to the job it reused; a sweep whose bandit policy stopped a trial draws its metric over the
trials (the stopped one apart, the best marked) and one parallel-coordinates line per trial, and a
line picks out its trial's row. Hostile display names, step names, parameter values and a metric
name stay text (the page fixture fails on any console error); axe-core clean on each page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import studio_helpers
from tests.browser.studio_helpers import axe_check, requests_after_load, screenshot, sign_in
from tests.conftest import RunningServer
from tests.integration.test_studio_graphs import EDGES, HOSTILE, pipeline_doc, sweep_doc
from tests.jobs_helpers import submit, wait_job

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page


def ws_page(srv: RunningServer, *parts: str) -> str:
    return f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default/" + "/".join(parts)


@pytest.fixture(scope="module")
def jobs(studio_srv: RunningServer) -> Iterator[None]:
    srv = studio_srv
    with srv.client() as api:
        submit(api, srv, "graph-one", pipeline_doc(HOSTILE))
        submit(api, srv, "stopping-sweep", sweep_doc(HOSTILE))
        # A metric named with markup: no trial reports it (MLflow refuses such a key), the page shows it.
        silent = {
            **sweep_doc(),
            "trial": {"command": "true"},
            "objective": {"goal": "maximize", "primary_metric": HOSTILE},
        }
        submit(
            api, srv, "silent-sweep", {**silent, "early_termination": None, "limits": {"max_total_trials": 1}}
        )
        assert wait_job(api, srv, "graph-one", timeout=180)["status"] == "Completed"
        submit(api, srv, "graph-two", pipeline_doc(HOSTILE))  # the same steps again: reused
        for name in ("graph-two", "stopping-sweep", "silent-sweep"):
            wait_job(api, srv, name, timeout=240)
        yield


def transform(page: Any) -> str:
    return str(page.locator("#graph-view .graph-world").get_attribute("transform"))


def test_the_full_page_graph_names_its_edges_and_a_step_leads_to_its_logs(
    studio_srv: RunningServer, jobs: None, page: Any
) -> None:
    sign_in(page, studio_srv)
    page.goto(ws_page(studio_srv, "jobs", "graph-one") + "?tab=children")
    page.get_by_role("link", name="Open full page").click()
    page.wait_for_url("**/jobs/graph-one/graph")
    page.locator("#graph-view[data-ready=true]").wait_for()
    assert page.locator(".graph-edge-text").all_text_contents() == EDGES
    assert page.locator(".graph-input .graph-port-name").text_content() == "greeting"
    assert page.locator(".graph-output .graph-port-name").text_content() == "final_scores"
    train = page.locator(".graph-node[data-key=train]")
    assert train.get_attribute("data-status") == "Completed"
    assert train.locator(".graph-component").text_content() == "inline command"
    assert page.get_by_role("heading", level=1).inner_text() == HOSTILE
    # Pan and zoom: the buttons, the keyboard and the wheel each move the drawing.
    fitted = transform(page)
    page.get_by_role("button", name="Zoom in").click()
    zoomed = transform(page)
    assert zoomed != fitted
    page.locator("#graph-view").focus()
    page.keyboard.press("ArrowLeft")
    assert transform(page) != zoomed
    page.keyboard.press("0")
    assert transform(page) == fitted
    page.locator("#graph-view").hover()
    page.mouse.wheel(0, -300)
    page.wait_for_function(
        "t => document.querySelector('#graph-view .graph-world').getAttribute('transform') !== t", arg=fitted
    )
    page.keyboard.press("0")
    # A step by keyboard: Tab reaches it, Enter opens its panel.
    train.focus()
    page.keyboard.press("Enter")
    panel = page.get_by_role("complementary")
    panel.get_by_role("heading", name="train").wait_for()
    assert "data ← prepare.clean" in panel.locator(".panel-ports").first.inner_text()
    assert "Completed" in panel.inner_text() and "inline command" in panel.inner_text()
    screenshot(page, "pipeline-graph")
    axe_check(page)
    panel.get_by_role("link", name="Open its logs").click()
    page.wait_for_url("**/jobs/graph-one-train?tab=outputs")
    page.locator("#log").wait_for()


def test_a_reused_step_wears_a_badge_linking_to_the_job_it_reused(
    studio_srv: RunningServer, jobs: None, page: Any
) -> None:
    sign_in(page, studio_srv)
    page.goto(ws_page(studio_srv, "jobs", "graph-two", "graph"))
    page.locator("#graph-view[data-ready=true]").wait_for()
    assert page.locator(".graph-node .graph-reused").count() == 3  # every step: nothing changed
    page.locator(".graph-node[data-key=prepare]").click()  # the step whose display name is hostile
    panel = page.get_by_role("complementary")
    panel.get_by_role("heading", name=HOSTILE).wait_for()
    assert panel.locator(".reused-badge").inner_text() == "Reused"
    screenshot(page, "pipeline-graph-reused")
    axe_check(page)
    panel.get_by_role("link", name="graph-one-prepare").click()
    page.wait_for_url("**/jobs/graph-one-prepare")


def test_a_sweeps_charts_mark_the_best_and_the_trial_stopped_early(
    studio_srv: RunningServer, jobs: None, page: Any
) -> None:
    sign_in(page, studio_srv)
    page.goto(ws_page(studio_srv, "jobs", "stopping-sweep") + "?tab=children")
    page.locator("#sweep-charts[data-ready=true]").wait_for()
    stopped_row = page.locator("#trials tr.stopped-early")
    assert stopped_row.count() == 1 and "Stopped early" in stopped_row.inner_text()
    assert "bandit policy at interval" in stopped_row.inner_text()
    chart = page.locator("#metric-chart")
    assert chart.get_attribute("data-trials") == "3" and chart.get_attribute("data-stopped") == "1"
    best = page.locator("#trials tr.best").get_attribute("data-key")
    assert chart.get_attribute("data-best") == best and chart.locator("canvas").count() == 1
    lines = page.locator("#parallel .pc-line")
    assert lines.count() == 3 and page.locator("#parallel .pc-line.pc-stopped").count() == 1
    assert page.locator("#parallel .pc-line.pc-best").get_attribute("data-id") == best
    ticks = page.locator("#parallel .pc-tick").all_text_contents()
    assert f"{HOSTILE[:21]}…" in ticks, ticks  # the note parameter's one (hostile) value, as text
    # Hover a line: its trial's row is picked out; Tab to one (keyboard): the line is.
    stopped_key = stopped_row.get_attribute("data-key")
    stopped_line = page.locator("#parallel .pc-line.pc-stopped")
    # The pointer on the line's first point (its lr, which no other trial shares).
    page.locator("#parallel").scroll_into_view_if_needed()
    x, y = stopped_line.evaluate(
        "l => { const p = l.points[0], m = l.getScreenCTM(); return [p.x * m.a + m.e, p.y * m.d + m.f]; }"
    )
    page.mouse.move(x, y)
    page.locator(f"#trials tr.pc-row-on[data-key='{stopped_key}']").wait_for()
    page.locator("#parallel .pc-line.pc-best").focus()
    page.locator("#parallel .pc-line.pc-best.pc-on").wait_for()
    page.locator(f"#trials tr.pc-row-on[data-key='{best}']").wait_for()
    axe_check(page)
    page.locator("#sweep-charts").scroll_into_view_if_needed()
    screenshot(page, "sweep-charts")


def test_a_metric_named_with_markup_stays_text(studio_srv: RunningServer, jobs: None, page: Any) -> None:
    sign_in(page, studio_srv)
    page.goto(ws_page(studio_srv, "jobs", "silent-sweep") + "?tab=children")
    page.locator("#sweep-charts[data-ready=true]").wait_for()
    assert HOSTILE in page.locator("#metric-chart figcaption").inner_text()
    assert page.locator("#parallel .pc-line").count() == 0  # no trial reported it
    axe_check(page)


# The chart module on its own (as sweep_charts.js calls it): a numeric axis runs from its smallest
# value (bottom) to its largest (top), linearly or (a log-uniform parameter) logarithmically; a
# categorical one spaces its values; lines coloured by the metric.
DRAW_NUMERIC = """async () => {
  const {parallelCoordinates} = await import("/studio/static/parallel_coords.js");
  const host = document.createElement("div");
  document.querySelector("main").append(host);
  const rows = [0.001, 0.01, 0.1].map((lr, i) => ({id: String(i), label: String(i), metric: 1 - i / 4,
    values: {lr, opt: i ? "adam" : "sgd", log_lr: lr, loss: 1 - i / 4}, stopped: false, best: i === 2}));
  const axes = [{name: "lr", kind: "number"}, {name: "opt", kind: "category", values: ["sgd", "adam"]},
    {name: "log_lr", kind: "number", log: true}, {name: "loss", kind: "number"}];
  const lines = parallelCoordinates(host, {axes, rows, goal: "minimize"});
  const ys = [...lines.values()].map((l) => [...l.points].map((p) => p.y));
  const ticks = [...host.querySelectorAll(".pc-tick")].map((t) => t.textContent);
  const strokes = [...lines.values()].map((l) => l.getAttribute("stroke"));
  host.remove();
  return {ys, ticks, strokes};
}"""


def test_the_parallel_coordinates_scale_numeric_axes_and_space_categories(
    studio_srv: RunningServer, page: Any
) -> None:
    sign_in(page, studio_srv)
    drawn = page.evaluate(DRAW_NUMERIC)
    lr = [ys[0] for ys in drawn["ys"]]
    assert lr[0] > lr[1] > lr[2]  # SVG y grows downwards: the largest lr is drawn highest
    assert lr[1] - lr[2] > 10 * (lr[0] - lr[1]) * 0.9  # linear: 0.01 sits near 0.001, far from 0.1
    opt = [ys[1] for ys in drawn["ys"]]
    assert opt[1] == opt[2] != opt[0]  # two trials chose adam: one slot
    assert drawn["ticks"][:3] == ["0.001", "0.0505", "0.1"] and drawn["ticks"][3:5] == ["sgd", "adam"]
    log_lr = [ys[2] for ys in drawn["ys"]]
    assert abs((log_lr[0] - log_lr[1]) - (log_lr[1] - log_lr[2])) < 0.01  # a log axis: evenly apart
    assert drawn["ticks"][5:8] == ["0.001", "0.01", "0.1"]
    assert drawn["strokes"][2] == "rgb(28,126,214)" and drawn["strokes"][0] == "rgb(232,89,12)"  # best, worst


def test_a_running_pipelines_full_page_graph_follows_its_steps(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    moving = pipeline_doc()
    moving["jobs"]["prepare"]["command"] = "sleep 6; echo ${{inputs.text}} > ${{outputs.clean}}/a"
    with srv.client() as api:
        submit(api, srv, "moving-graph", moving)
        sign_in(page, srv)
        page.goto(ws_page(srv, "jobs", "moving-graph", "graph"))
        page.locator("#graph-view[data-ready=true]").wait_for()
        requested = requests_after_load(page)
        assert page.locator(".graph-node[data-key=score]").get_attribute("data-status") != "Completed"
        # No reload, nothing read again: the graph/live stream brings each change, and the steps,
        # the table and the header follow.
        page.locator(".graph-node[data-key=score][data-status=Completed]").wait_for(timeout=120_000)
        page.locator("#pipeline-status", has_text="Completed").wait_for()
        assert "Completed" in page.locator("#graph-steps tr[data-id='step:score']").inner_text()
        page.locator("#graph-refresh:empty").wait_for(state="attached")  # the stream's end
        assert requested == [], requested
        assert wait_job(api, srv, "moving-graph")["status"] == "Completed"


def test_a_running_sweeps_charts_follow_its_trials(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    with srv.client() as api:
        submit(api, srv, "moving-sweep", sweep_doc("moving"))
        sign_in(page, srv)
        page.goto(ws_page(srv, "jobs", "moving-sweep") + "?tab=children")
        page.locator("#sweep-charts[data-ready=true]").wait_for()
        requested = requests_after_load(page)
        chart = page.locator("#metric-chart")
        assert chart.get_attribute("data-trials") != "3"  # not every trial reported yet
        # The trials/live stream brings each change: every trial charted, no trials.json read again.
        page.locator("#metric-chart[data-trials='3']").wait_for(timeout=120_000)
        page.locator("#sweep-charts-state:empty").wait_for(
            state="attached", timeout=120_000
        )  # the sweep final, the stream ended
        assert chart.get_attribute("data-stopped") == "1"
        assert not [url for url in requested if "trials" in url], requested
        assert wait_job(api, srv, "moving-sweep")["status"] == "Completed"
