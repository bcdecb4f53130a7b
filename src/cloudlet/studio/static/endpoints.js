// Online endpoint pages: the YAML/JSON editors, archive uploads, the traffic
// sliders (Save only when the split is one the service accepts) and the Monitoring charts.
// An ES module (no inline script anywhere: the CSP forbids it). Data is set as text, never HTML.
import { selectLine, uploadArchive } from "./forms.js";
import { LiveSource } from "./live.js";

// -- editors: each marked text area becomes the studio's editor; the area stays the form's field.
const views = new Map();
for (const input of document.querySelectorAll("input[data-yaml-into]")) {
  input.addEventListener("change", async () => {
    const file = input.files && input.files[0];
    if (!file) return;
    const text = await file.text();
    const view = views.get(input.dataset.yamlInto);
    if (view) view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
    else document.getElementById(input.dataset.yamlInto).value = text;
  });
}
const areas = document.querySelectorAll("textarea[data-yaml-editor]");
if (areas.length) {
  const { yamlEditor } = await import("./editor.js");
  for (const area of areas) {
    const host = document.createElement("div");
    host.className = "yaml-host";
    area.before(host);
    area.hidden = true;
    const view = yamlEditor(host, area.value, { label: area.dataset.yamlEditor });
    view.scrollDOM.tabIndex = 0;
    views.set(area.id, view);
    selectLine(view, Number(area.dataset.errorLine || 0));
    area.form.addEventListener("submit", () => {
      area.value = view.state.doc.toString();
    });
  }
}

// -- archives (code, model): uploaded at once as code snapshots; the form keeps their ids.
for (const input of document.querySelectorAll("input[data-upload]")) {
  input.addEventListener("change", async () => {
    const file = input.files && input.files[0];
    if (!file) return;
    const field = document.getElementById(input.dataset.into);
    const help = document.getElementById(`${input.dataset.into}-help`);
    await uploadArchive(input.dataset.upload, file, field, help, input.form.querySelector("button[type=submit]"));
  });
}

// -- traffic: each slider mirrors its number; Save waits for a valid split (the service's rule:
// traffic sums to 100 or 0; one mirror, at most max %, to a deployment taking no live traffic).
const trafficForm = document.getElementById("traffic-form");
if (trafficForm) {
  const maxMirror = Number(trafficForm.dataset.maxMirror);
  const numbers = [...trafficForm.querySelectorAll("input.weight-number")];
  const save = document.getElementById("save-traffic");
  const total = document.getElementById("traffic-total");
  const rule = document.getElementById("traffic-rule");
  const baseRule = rule.textContent;
  const check = () => {
    const value = (kind, name) => Number(document.getElementById(`${kind}-${name}`).value || 0);
    const names = [...new Set(numbers.map((n) => n.dataset.deployment))];
    const sum = names.reduce((acc, name) => acc + value("traffic", name), 0);
    const mirrored = names.filter((name) => value("mirror", name) > 0);
    total.textContent = String(sum);
    let problem = "";
    if (numbers.some((n) => !Number.isInteger(Number(n.value)) || Number(n.value) < 0)) problem = "Weights are whole numbers from 0.";
    else if (sum !== 100 && sum !== 0) problem = `Traffic adds up to ${sum}: it must be 100 (or 0).`;
    else if (mirrored.length > 1) problem = "Only one deployment can be mirrored.";
    else if (mirrored.some((name) => value("mirror", name) > maxMirror)) problem = `A mirror is at most ${maxMirror} %.`;
    else if (mirrored.some((name) => value("traffic", name) > 0)) problem = "Mirror only a deployment at 0 % traffic.";
    rule.textContent = problem || baseRule;
    rule.classList.toggle("field-error", Boolean(problem));
    if (save) save.disabled = Boolean(problem);
  };
  for (const slider of trafficForm.querySelectorAll("input[type=range][data-pair]")) {
    const number = document.getElementById(slider.dataset.pair);
    slider.addEventListener("input", () => {
      number.value = slider.value;
      check();
    });
    number.addEventListener("input", () => {
      slider.value = number.value;
      check();
    });
  }
  check();
}

// -- monitoring: the counters, an event every 2 s from a server-sent event stream (…/metrics/live);
// each interval's requests and errors (differences of the counters) and its p50/p95 latency (the
// server's, over the requests answered since the last event).
const monitoring = document.getElementById("monitoring");
if (monitoring) {
  const { uPlot } = await import("./vendor/uplot.min.js");
  const colours = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2"];
  const charts = {};
  let drawnNames = "";
  const times = [];
  const series = {}; // deployment → {requests, errors, p50, p95}: one value per interval
  const keys = ["requests", "errors", "p50", "p95"];
  let previous = null;
  const lines = (names, fields) =>
    names.flatMap((n, i) =>
      fields.map((f) => ({
        label: fields.length > 1 ? `${n} ${f}` : n,
        stroke: colours[i % colours.length],
        width: 2,
        dash: f === "p95" ? [6, 4] : undefined,
        spanGaps: true,
      })),
    );
  const chartData = (names, fields) => [times, ...names.flatMap((n) => fields.map((f) => series[n][f]))];
  const layout = [
    ["chart-requests", ["requests"]],
    ["chart-errors", ["errors"]],
    ["chart-latency", ["p50", "p95"]],
  ];
  const draw = (names) => {
    const rebuild = drawnNames !== names.join();
    for (const [id, fields] of layout) {
      if (rebuild) {
        charts[id]?.destroy();
        const host = document.getElementById(id);
        host.replaceChildren();
        const opts = {
          width: Math.max(280, host.clientWidth || 400),
          height: 180,
          series: [{}, ...lines(names, fields)],
          axes: [{}, { size: 50 }],
        };
        charts[id] = new uPlot(opts, chartData(names, fields), host);
      } else {
        charts[id].setData(chartData(names, fields));
      }
    }
    drawnNames = names.join();
  };
  const table = document.getElementById("metrics-table");
  const show = (now) => {
    const names = Object.keys(now.deployments).sort();
    for (const name of names) {
      const row = table.querySelector(`tr[data-deployment="${CSS.escape(name)}"]`);
      if (!row) continue;
      for (const cell of row.querySelectorAll("[data-field]")) {
        const value = now.deployments[name][cell.dataset.field];
        cell.textContent = value === null || value === undefined ? "—" : String(value);
      }
    }
    if (previous) {
      times.push(now.t);
      for (const name of names) {
        series[name] ??= Object.fromEntries(keys.map((k) => [k, times.slice(1).map(() => null)]));
        const a = previous.deployments[name] || { requests: 0, failures: 0 };
        const b = now.deployments[name];
        series[name].requests.push(b.requests - a.requests);
        series[name].errors.push(b.failures - a.failures);
        series[name].p50.push(b.p50_ms);
        series[name].p95.push(b.p95_ms);
      }
      for (const name of Object.keys(series)) {
        for (const key of keys) {
          while (series[name][key].length < times.length) series[name][key].push(null);
        }
      }
      draw(Object.keys(series).sort());
    }
    previous = now;
  };
  const source = new LiveSource(monitoring.dataset.stream);
  source.addEventListener("metrics", (e) => show(JSON.parse(e.data)));
  source.addEventListener("end", () => source.close());
  source.addEventListener("failed", () => source.close());
}
