// A job's page (job_page.html): live status and timings, the live log tail, metric charts (uPlot),
// the pipeline graph (dagre, drawn as SVG here) and the sortable sweep table.
// Everything user-controlled is put in the page as text (textContent, text nodes), never as HTML.
import {LiveSource} from "./live.js";
import {pill, tone} from "./status.js";

const root = document.getElementById("job");
let jobFinal = root?.dataset.final === "true";

function showStatus(data) {
  document.getElementById("job-status")?.replaceChildren(pill(data.status));
  const fields = {...data, status_text: data.status};
  for (const el of document.querySelectorAll("[data-timing]")) {
    const value = fields[el.dataset.timing];
    if (value !== undefined) el.textContent = String(value);
  }
  // Why it waited no longer holds once it started.
  if (!["Queued", "Preparing"].includes(data.status)) document.querySelector(".waiting")?.remove();
  jobFinal = data.final;
  root.dataset.final = String(data.final);
  document.dispatchEvent(new CustomEvent("job:status", {detail: data}));
}

// A queued job's reason, position and estimated start as its compute's queue moves (the stream sends
// them when they change; the queue is read again at least every 5 s).
function inWords(seconds) {
  if (seconds < 60) return "in < 1 min";
  const minutes = Math.ceil(seconds / 60);
  if (minutes < 60) return `in ~${minutes} min`;
  const hours = Math.floor(minutes / 60), rest = minutes % 60;
  return rest ? `in ~${hours} h ${rest} min` : `in ~${hours} h`;
}

function showWaiting(data) {
  const box = document.querySelector(".waiting");
  if (!box) return;
  for (const el of box.querySelectorAll("[data-wait]")) {
    const value = data[el.dataset.wait];
    if (value !== undefined && value !== null) el.textContent = String(value);
  }
  const eta = box.querySelector("[data-wait-eta]");
  if (eta && data.eta) {
    eta.setAttribute("datetime", data.eta);
    eta.textContent = data.eta.replace("T", " ").replace("Z", " UTC");
  }
  const words = box.querySelector("[data-wait-in]");
  if (words && data.eta) words.textContent = inWords((Date.parse(data.eta) - Date.now()) / 1000);
  const asOf = box.querySelector("[data-wait-as-of]");
  if (asOf && data.as_of) {
    asOf.setAttribute("datetime", data.as_of);
    asOf.textContent = `${data.as_of.slice(11, 19)} UTC`;
  }
}

// -- the live stream: status on every tab, the log's new bytes on Outputs + logs -------------------
function connect() {
  const log = document.getElementById("log");
  if (!root || (!log && jobFinal)) return;
  const source = new LiveSource(log ? log.dataset.stream : root.dataset.live);
  const state = document.getElementById("log-state");
  const follow = document.getElementById("log-follow");
  source.addEventListener("status", (e) => showStatus(JSON.parse(e.data)));
  source.addEventListener("waiting", (e) => showWaiting(JSON.parse(e.data)));
  source.addEventListener("open", () => { if (state) state.textContent = jobFinal ? "Reading…" : "Live"; });
  source.addEventListener("log", (e) => {
    const {text} = JSON.parse(e.data);
    log.append(document.createTextNode(text));
    if (follow?.checked) log.scrollTop = log.scrollHeight;
  });
  source.addEventListener("files", (e) => showFiles(JSON.parse(e.data)));
  source.addEventListener("failed", (e) => {
    if (state) state.textContent = JSON.parse(e.data).message;
    source.close();
  });
  source.addEventListener("end", () => {
    if (state) state.textContent = "Complete";
    source.close();
  });
  source.addEventListener("error", () => {
    if (state && source.readyState !== EventSource.CLOSED) state.textContent = "Reconnecting…";
  });
}

// The log tree gains the files a starting job creates (the first render may have had none).
function showFiles(files) {
  const tree = document.getElementById("log-tree");
  if (!tree || !files.length) return;
  const shown = new Set([...tree.querySelectorAll("a")].map((a) => a.dataset.file || a.textContent));
  if (files.every((f) => shown.has(f) || shown.has(f.split("/").pop()))) return;
  const current = new URLSearchParams(document.getElementById("log").dataset.stream.split("?")[1]).get("file");
  const items = files.map((file) => {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = `${tree.dataset.base}&file=${encodeURIComponent(file)}`;
    a.dataset.file = file;
    a.textContent = file;
    if (file === current) a.setAttribute("aria-current", "page");
    li.append(a);
    return li;
  });
  tree.replaceChildren(...items);
}

// -- metrics: one uPlot chart per key; other runs of the experiment overlaid -----------------------
const COLOURS = ["#0f62c6", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#1098ad", "#5f3dc4", "#e67700"];

const MAX_CHARTS = 64;

async function metrics() {
  const host = document.getElementById("metrics");
  if (!host) return;
  const {uPlot} = await import("./vendor/uplot.min.js");
  const charts = document.getElementById("charts");
  const state = document.getElementById("metrics-state");
  const drawn = new Map(); // key → {plot, card, signature, points}
  const logged = new Map(); // key → Map(run → [[steps], [values]]), in the order they were logged
  let source = null;

  // The points come by a server-sent event stream: the history first, then each new point as
  // it is logged (no re-read). Ticking a run to compare opens the stream again for the new set.
  function follow() {
    source?.close();
    for (const chart of drawn.values()) { chart.plot.destroy(); chart.card.remove(); }
    drawn.clear();
    logged.clear();
    const url = new URL(host.dataset.stream, location.href);
    for (const box of host.querySelectorAll("input[name=run]:checked")) url.searchParams.append("run", box.value);
    source = new LiveSource(url);
    source.addEventListener("points", (e) => {
      const body = JSON.parse(e.data);
      for (const [key, runs] of Object.entries(body.metrics)) {
        if (!logged.has(key) && logged.size >= MAX_CHARTS) continue;
        const byRun = logged.get(key) || new Map();
        logged.set(key, byRun);
        for (const [run, [xs, ys]] of Object.entries(runs)) {
          const [steps, values] = byRun.get(run) || [[], []];
          for (let i = 0; i < xs.length; i++) { steps.push(xs[i]); values.push(ys[i]); }
          byRun.set(run, [steps, values]);
        }
        draw(key, body.runs, Object.fromEntries(byRun));
        drawn.get(key).card.dataset.shownAt = String(Date.now()); // when its newest point showed (tests)
      }
      state.textContent = `${logged.size} metric${logged.size === 1 ? "" : "s"}`;
    });
    source.addEventListener("end", () => source.close());
    source.addEventListener("failed", (e) => {
      state.textContent = `Metrics could not be read: ${JSON.parse(e.data).message}`;
      source.close();
    });
  }

  function draw(key, runs, series) {
    // One x axis (the steps of every run, merged), one y series per run.
    const present = runs.filter((run) => series[run]);
    const steps = [...new Set(present.flatMap((run) => series[run][0]))].sort((a, b) => a - b);
    const index = new Map(steps.map((s, i) => [s, i]));
    const columns = [steps];
    for (const run of present) {
      const ys = new Array(steps.length).fill(null);
      const [xs, vs] = series[run];
      for (let i = 0; i < xs.length; i++) ys[index.get(xs[i])] = vs[i];
      columns.push(ys);
    }
    const signature = present.join(" ");
    const old = drawn.get(key);
    if (old && old.signature === signature) {
      if (old.points !== steps.length) {
        old.plot.setData(columns);
        old.points = steps.length;
        old.card.dataset.points = String(steps.length);
      }
      return;
    }
    old?.plot.destroy();
    const card = old?.card || document.createElement("figure");
    card.className = "card chart";
    const title = document.createElement("figcaption");
    title.className = "chart-title mono";
    title.textContent = key;
    const area = document.createElement("div");
    card.replaceChildren(title, area);
    if (!old) charts.append(card);
    const width = Math.max(320, card.clientWidth - 40);
    const options = {
      width, height: 240,
      scales: {x: {time: false}},
      axes: [{label: "step"}, {}],
      series: [{label: "step"}, ...present.map((run, i) => ({label: run, stroke: COLOURS[i % COLOURS.length], width: 1.5, spanGaps: true}))],
    };
    // The draw time: from here to uPlot's first "draw" hook (it draws in a microtask, after
    // the constructor returns), data-draw-ms on the chart.
    const started = performance.now();
    options.hooks = {draw: [() => { card.dataset.drawMs ||= (performance.now() - started).toFixed(1); }]};
    delete card.dataset.drawMs;
    card.dataset.points = String(steps.length);
    card.dataset.key = key;
    const plot = new uPlot(options, columns, area);
    drawn.set(key, {plot, card, signature, points: steps.length});
  }

  host.addEventListener("change", follow);
  follow();
}

// -- monitoring: the job's resource samples per node, one uPlot chart per measured metric ------------
const MONITORED = [
  ["cpu_percent", "CPU (% of one core)", 1],
  ["memory_bytes", "Memory (MiB)", 1 / 1048576],
  ["read_bps", "Disk read (KiB/s)", 1 / 1024],
  ["write_bps", "Disk write (KiB/s)", 1 / 1024],
  ["net_rx_bps", "Node network in (KiB/s)", 1 / 1024],
  ["net_tx_bps", "Node network out (KiB/s)", 1 / 1024],
  ["disk_used_bytes", "Node disk used (GiB)", 1 / 1073741824],
  ["gpu_percent", "GPU utilisation (%)", 1],
  ["gpu_memory_bytes", "GPU memory (MiB)", 1 / 1048576],
];

async function monitoring() {
  const host = document.getElementById("monitoring");
  if (!host) return;
  const {uPlot} = await import("./vendor/uplot.min.js");
  const state = document.getElementById("monitoring-state");
  const nodes = document.getElementById("monitoring-nodes");
  const drawn = new Map(); // node + field → {plot, card}

  function text(tag, className, value) {
    const el = document.createElement(tag);
    el.className = className;
    el.textContent = value;
    return el;
  }

  function draw(node, holder) {
    const samples = String(node.series.n.reduce((a, b) => a + b, 0));
    for (const [field, label, scale] of MONITORED) {
      const values = node.series[field];
      if (!values || values.every((v) => v === null)) continue;
      const columns = [node.series.t, values.map((v) => (v === null ? null : v * scale))];
      const id = `${node.node} ${field}`;
      const old = drawn.get(id);
      if (old) { // sent only when it changed: a bucket may fill in place
        old.plot.setData(columns);
        old.card.dataset.samples = samples;
        continue;
      }
      const card = document.createElement("figure");
      card.className = "card chart";
      card.dataset.key = field;
      card.dataset.samples = samples; // how many samples it draws (tests watch it grow)
      const area = document.createElement("div");
      card.append(text("figcaption", "chart-title", label), area);
      holder.append(card);
      const options = {
        width: Math.max(320, card.clientWidth - 40), height: 200,
        series: [{}, {label, stroke: COLOURS[0], width: 1.5, spanGaps: false}],
      };
      drawn.set(id, {plot: new uPlot(options, columns, area), card});
    }
  }

  function show(body) {
    if (!body.nodes.length) {
      state.textContent = body.final ? "No resource samples were taken for this job." : "No samples yet: they appear a few seconds after the job starts.";
    } else {
      state.textContent = body.idle ? "Idle: the job's CPU has stayed near 0 %." : `${body.nodes.length} node${body.nodes.length === 1 ? "" : "s"} sampled`;
      state.classList.toggle("idle", body.idle);
    }
    for (const node of body.nodes) {
      let holder = nodes.querySelector(`[data-node="${CSS.escape(node.node)}"] .charts`);
      if (!holder) {
        const section = document.createElement("section");
        section.dataset.node = node.node;
        section.append(text("h3", "node-title mono", `Node ${node.node}${node.gpu ? "" : " · no GPU"}`));
        holder = document.createElement("div");
        holder.className = "charts";
        section.append(holder);
        nodes.append(section);
      }
      draw(node, holder);
    }
    if (body.final) jobFinal = true;
  }

  // The stream's first event is everything stored so far; then the data again whenever a sample
  // changed it, until the job is final and nothing more came (then "end").
  const source = new LiveSource(host.dataset.stream);
  source.addEventListener("monitoring", (e) => show(JSON.parse(e.data)));
  source.addEventListener("failed", (e) => {
    state.textContent = `Monitoring could not be read: ${JSON.parse(e.data).message}`;
    source.close();
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) state.textContent = "Monitoring could not be read.";
  });
  source.addEventListener("end", () => source.close());
}

// -- the pipeline graph: dagre lays the steps out, drawn here as SVG with links to each step -------
const SVG = "http://www.w3.org/2000/svg";

function svg(name, attributes) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attributes)) el.setAttribute(k, String(v));
  return el;
}

async function graph() {
  const host = document.getElementById("dag");
  const rows = document.querySelectorAll("#steps tbody tr");
  if (!host || !rows.length) return;
  const {dagre} = await import("./vendor/dagre.min.js");
  const g = new dagre.graphlib.Graph().setGraph({rankdir: "TB", nodesep: 40, ranksep: 48, marginx: 16, marginy: 16});
  g.setDefaultEdgeLabel(() => ({}));
  for (const row of rows) g.setNode(row.dataset.key, {width: 220, height: 56, row});
  for (const row of rows) {
    for (const up of row.dataset.upstream.split(" ").filter(Boolean)) if (g.hasNode(up)) g.setEdge(up, row.dataset.key);
  }
  dagre.layout(g);
  const {width, height} = g.graph();
  const drawing = svg("svg", {viewBox: `0 0 ${width} ${height}`, width, height, class: "dag-svg"});
  const marker = svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto"});
  marker.append(svg("path", {d: "M0,0 L10,5 L0,10 z", class: "dag-arrow"}));
  const defs = svg("defs", {});
  defs.append(marker);
  drawing.append(defs);
  for (const e of g.edges()) {
    const points = g.edge(e).points;
    const d = points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join(" ");
    drawing.append(svg("path", {d, class: "dag-edge", "marker-end": "url(#arrow)"}));
  }
  for (const key of g.nodes()) {
    const node = g.node(key);
    const {status, href} = node.row.dataset;
    const group = href ? svg("a", {href, class: "dag-node"}) : svg("g", {class: "dag-node"});
    group.setAttribute("data-key", key);
    group.setAttribute("data-status", status);
    const x = node.x - node.width / 2;
    const y = node.y - node.height / 2;
    group.append(svg("rect", {x, y, width: node.width, height: node.height, rx: 8, class: `dag-box tone-${tone(status)}`}));
    group.append(svg("rect", {x, y, width: 5, height: node.height, rx: 2, class: `dag-bar tone-${tone(status)}`}));
    const name = svg("text", {x: x + 16, y: y + 23, class: "dag-name"});
    name.textContent = key.length > 26 ? `${key.slice(0, 25)}…` : key;
    const state = svg("text", {x: x + 16, y: y + 42, class: `dag-status tone-${tone(status)}`});
    state.textContent = status;
    const title = svg("title", {});
    title.textContent = `${key}: ${status}`;
    group.append(title, name, state);
    drawing.append(group);
  }
  host.replaceChildren(drawing);
}

// -- a sortable table (the sweep's trials) -----------------------------------------------------------
let sortedBy = null; // {column, ascending}: kept when the stream swaps a fresh table in

function sortRows(table, column, ascending) {
  const heads = [...table.querySelectorAll("thead th")];
  const numeric = heads[column]?.querySelector("button")?.dataset.type === "number";
  for (const other of heads) other.setAttribute("aria-sort", "none");
  heads[column]?.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const body = table.tBodies[0];
  const rows = [...body.rows];
  const value = (row) => row.cells[column].dataset.value ?? row.cells[column].textContent;
  rows.sort((a, b) => {
    let x = value(a), y = value(b);
    if (numeric) {
      x = x === "" ? Infinity : Number(x); y = y === "" ? Infinity : Number(y);
      const order = Number.isNaN(x) || Number.isNaN(y) ? String(x).localeCompare(String(y)) : x - y;
      return ascending ? order : -order;
    }
    return ascending ? x.localeCompare(y) : y.localeCompare(x);
  });
  body.replaceChildren(...rows);
}

// One listener for every sortable table, present or swapped in later by the stream.
document.addEventListener("click", (event) => {
  const button = event.target.closest?.("table.sortable thead th button");
  if (!button) return;
  const th = button.closest("th");
  const column = [...th.parentElement.children].indexOf(th);
  sortedBy = {column, ascending: th.getAttribute("aria-sort") !== "ascending"};
  sortRows(th.closest("table"), column, sortedBy.ascending);
});

function keepSort() {
  if (!sortedBy) return;
  for (const table of document.querySelectorAll("table.sortable")) {
    if (sortedBy.column < table.querySelectorAll("thead th").length) sortRows(table, sortedBy.column, sortedBy.ascending);
  }
}

// -- a running pipeline's steps and a sweep's trials: htmx swaps the section in from its stream ----
document.getElementById("children")?.addEventListener("htmx:afterSwap", () => {
  keepSort();
  graph();
});

connect();
graph();
metrics();
monitoring();
