// A sweep's charts on its Child jobs tab (job_children.html), from trials.json: the primary metric
// of each trial by trial number (uPlot; the best marked, the early-terminated trials drawn hollow and
// red), and the parameters against the metric (parallel_coords.js). The data comes by a server-sent
// event stream (…/trials/live): once at once, again whenever a trial changed, until the sweep is
// final; nothing is read again. Every user-controlled string goes in as text.
import {uPlot} from "./vendor/uplot.min.js";
import {parallelCoordinates} from "./parallel_coords.js";
import {LiveSource} from "./live.js";

const host = document.getElementById("sweep-charts");

function pointsOnly(label, stroke, fill, size) {
  return {label, stroke, fill, width: 2, paths: () => null, points: {show: true, size, stroke, fill, width: 2}};
}

function metricChart(figure, body, old) {
  const area = figure.querySelector(".metric-plot");
  const trials = body.trials.filter((t) => t.metric !== null);
  // x: the trial's number (its key), y: its last value of the primary metric; one series each for
  // the trials, those stopped early and the best, so that each is drawn its own way.
  const rows = trials.map((t, i) => ({x: t.index ?? i, t})).sort((a, b) => a.x - b.x);
  const xs = rows.map((r) => r.x);
  const plain = rows.map((r) => (r.t.early_terminated || r.t.key === body.best ? null : r.t.metric));
  const stopped = rows.map((r) => (r.t.early_terminated ? r.t.metric : null));
  const best = rows.map((r) => (r.t.key === body.best ? r.t.metric : null));
  figure.dataset.trials = String(rows.length);
  figure.dataset.stopped = String(stopped.filter((v) => v !== null).length);
  figure.dataset.best = body.best ?? "";
  const columns = [xs, plain, stopped, best];
  if (old) { old.setData(columns); return old; }
  const options = {
    width: Math.max(320, area.clientWidth || 480), height: 300,
    // Half a trial and a little of the metric's span around the points, so none sits on the frame.
    scales: {
      x: {time: false, range: (u, low, high) => [low - 0.5, high + 0.5]},
      y: {range: (u, low, high) => { const pad = (high - low) * 0.08 || Math.abs(low) * 0.1 || 1; return [low - pad, high + pad]; }},
    },
    axes: [{label: "trial", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]}, {label: body.metric}],
    series: [
      {label: "trial"},
      pointsOnly("trial", "#0f62c6", "#0f62c6", 8),
      pointsOnly("stopped early", "#c62828", "#ffffff", 10),
      pointsOnly("best", "#1a7f37", "#1a7f37", 14),
    ],
    legend: {show: false},
  };
  return new uPlot(options, columns, area);
}

function parallel(figure, body) {
  const axes = [...body.axes, {name: body.metric, kind: "number"}];
  const rows = body.trials.filter((t) => t.metric !== null).map((t) => ({
    id: t.key,
    label: t.key,
    values: {...t.params, [body.metric]: t.metric},
    metric: t.metric,
    stopped: t.early_terminated,
    best: t.key === body.best,
  }));
  const onFocus = (id) => {
    for (const tr of document.querySelectorAll("#trials tbody tr")) tr.classList.toggle("pc-row-on", tr.dataset.key === id);
  };
  const lines = parallelCoordinates(figure.querySelector(".parallel-plot"), {axes, rows, goal: body.goal, onFocus});
  figure.dataset.lines = String(lines.size);
}

function main() {
  if (!host) return;
  const state = document.getElementById("sweep-charts-state");
  let plot = null;
  const source = new LiveSource(host.dataset.stream);
  source.addEventListener("trials", (e) => {
    const body = JSON.parse(e.data);
    plot = metricChart(document.getElementById("metric-chart"), body, plot);
    parallel(document.getElementById("parallel"), body);
    host.dataset.ready = "true";
    if (body.final) state.textContent = "";
  });
  source.addEventListener("end", () => { source.close(); state.textContent = ""; });
  source.addEventListener("failed", (e) => {
    state.textContent = `The trials could not be read: ${JSON.parse(e.data).message}`;
    source.close();
  });
}

main();
