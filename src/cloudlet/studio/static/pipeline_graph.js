// A pipeline's graph as a full page (job_graph.html): dagre lays out the steps, the pipeline's inputs
// and outputs, and one edge per binding (labelled "train.model → score.model_in"); drawn as SVG with
// pan and zoom (drag, wheel, the buttons, the keyboard). A step opens a side panel (click, Enter or
// Space). The graph comes by a server-sent event stream (…/graph/live): drawn from its first event,
// the statuses follow each later one until the pipeline is final; graph.json is never read again.
// Everything user-controlled goes in as text (textContent), never as HTML.
import {dagre} from "./vendor/dagre.min.js";
import {LiveSource} from "./live.js";
import {pill, tone} from "./status.js";

const SVG = "http://www.w3.org/2000/svg";
const STEP = {width: 250, height: 78};
const PORT = {width: 190, height: 40};
const root = document.getElementById("pipeline");
const view = document.getElementById("graph-view");

function svg(name, attributes = {}) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attributes)) el.setAttribute(k, String(v));
  return el;
}

function text(x, y, value, className, max) {
  const el = svg("text", {x, y, class: className});
  el.textContent = value.length > max ? `${value.slice(0, max - 1)}…` : value;
  return el;
}

// -- layout and drawing -------------------------------------------------------------------------------
function layout(data) {
  const g = new dagre.graphlib.Graph({multigraph: true});
  g.setGraph({rankdir: "TB", nodesep: 50, ranksep: 70, edgesep: 20, marginx: 24, marginy: 24});
  for (const name of data.inputs) g.setNode(`input:${name}`, {...PORT, kind: "input", name});
  for (const step of data.steps) g.setNode(step.id, {...STEP, kind: "step", step});
  for (const name of data.outputs) g.setNode(`output:${name}`, {...PORT, kind: "output", name});
  data.edges.forEach((edge, i) => {
    if (!g.hasNode(edge.source) || !g.hasNode(edge.target)) return;
    const width = Math.min(edge.label.length, 60) * 6.6 + 14;
    g.setEdge(edge.source, edge.target, {label: edge.label, width, height: 20, labelpos: "c", edge}, String(i));
  });
  dagre.layout(g);
  return g;
}

function drawStep(group, node) {
  const {step} = node;
  const x = node.x - node.width / 2;
  const y = node.y - node.height / 2;
  group.replaceChildren();
  group.setAttribute("data-status", step.status);
  group.setAttribute("aria-label", `Step ${step.display_name}: ${step.component}, ${step.status}` +
    (step.reused_from ? `, reused from ${step.reused_from}` : ""));
  group.append(svg("rect", {x, y, width: node.width, height: node.height, rx: 8, class: "dag-box"}));
  group.append(svg("rect", {x, y, width: 5, height: node.height, rx: 2, class: `dag-bar tone-${tone(step.status)}`}));
  group.append(text(x + 16, y + 22, step.display_name, "dag-name", 28));
  group.append(text(x + 16, y + 41, step.component, "graph-component", 34));
  group.append(text(x + 16, y + 62, step.status, `dag-status tone-${tone(step.status)}`, 20));
  if (step.reused_from) {
    const badge = svg("g", {class: "graph-reused"});
    badge.append(svg("rect", {x: x + node.width - 70, y: y + 50, width: 58, height: 18, rx: 9}));
    badge.append(text(x + node.width - 41, y + 63, "Reused", "graph-reused-text", 10));
    group.append(badge);
  }
}

function drawPort(group, node) {
  const x = node.x - node.width / 2;
  const y = node.y - node.height / 2;
  group.append(svg("rect", {x, y, width: node.width, height: node.height, rx: node.height / 2, class: "graph-port-box"}));
  group.append(text(node.x, y + 16, node.kind === "input" ? "pipeline input" : "pipeline output", "graph-port-kind", 30));
  group.append(text(node.x, y + 32, node.name, "graph-port-name", 26));
  const title = svg("title");
  title.textContent = `${node.kind === "input" ? "Pipeline input" : "Pipeline output"} ${node.name}`;
  group.append(title);
}

function draw(g, open) {
  const drawing = svg("svg", {class: "graph-svg", width: "100%", height: "100%"});
  const defs = svg("defs");
  const marker = svg("marker", {id: "graph-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto"});
  marker.append(svg("path", {d: "M0,0 L10,5 L0,10 z", class: "dag-arrow"}));
  defs.append(marker);
  const world = svg("g", {class: "graph-world"});
  drawing.append(defs, world);
  for (const e of g.edges()) {
    const edge = g.edge(e);
    const d = edge.points.map((p, i) => `${i ? "L" : "M"}${p.x},${p.y}`).join(" ");
    const line = svg("g", {class: "graph-edge", "data-source": e.v, "data-target": e.w});
    line.append(svg("path", {d, class: "dag-edge", "marker-end": "url(#graph-arrow)"}));
    const label = svg("g", {class: "graph-edge-label"});
    label.append(svg("rect", {x: edge.x - edge.width / 2, y: edge.y - edge.height / 2, width: edge.width, height: edge.height, rx: 4}));
    label.append(text(edge.x, edge.y + 4, edge.label, "graph-edge-text", 60));
    line.append(label);
    world.append(line);
  }
  const steps = new Map();
  for (const id of g.nodes()) {
    const node = g.node(id);
    const group = svg("g", {class: `graph-node graph-${node.kind}`, "data-id": id});
    if (node.kind === "step") {
      group.setAttribute("tabindex", "0");
      group.setAttribute("role", "button");
      group.setAttribute("data-key", node.step.key);
      drawStep(group, node);
      group.addEventListener("click", () => open(id, group));
      group.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); open(id, group); }
      });
      steps.set(id, {group, node});
    } else {
      drawPort(group, node);
    }
    world.append(group);
  }
  view.replaceChildren(drawing);
  return {drawing, world, steps};
}

// -- pan and zoom --------------------------------------------------------------------------------------
function panZoom(drawing, world, size) {
  const at = {x: 0, y: 0, k: 1};
  const apply = () => world.setAttribute("transform", `translate(${at.x},${at.y}) scale(${at.k})`);
  const clamp = (k) => Math.min(3, Math.max(0.15, k));
  const zoomAt = (factor, px, py) => {
    const k = clamp(at.k * factor);
    at.x = px - (px - at.x) * (k / at.k);
    at.y = py - (py - at.y) * (k / at.k);
    at.k = k;
    apply();
  };
  const centre = () => ({x: view.clientWidth / 2, y: view.clientHeight / 2});
  const fit = () => {
    const k = clamp(Math.min(view.clientWidth / size.width, view.clientHeight / size.height, 1.2));
    at.k = k;
    at.x = (view.clientWidth - size.width * k) / 2;
    at.y = Math.max(0, (view.clientHeight - size.height * k) / 2);
    apply();
  };
  drawing.addEventListener("wheel", (event) => {
    event.preventDefault();
    const box = drawing.getBoundingClientRect();
    zoomAt(Math.exp(-event.deltaY * 0.0015), event.clientX - box.left, event.clientY - box.top);
  }, {passive: false});
  let drag = null;
  drawing.addEventListener("pointerdown", (event) => {
    if (event.target.closest(".graph-node[tabindex]")) return; // a step: a click opens it
    drag = {x: event.clientX - at.x, y: event.clientY - at.y};
    drawing.setPointerCapture(event.pointerId);
    drawing.classList.add("dragging");
  });
  drawing.addEventListener("pointermove", (event) => {
    if (!drag) return;
    at.x = event.clientX - drag.x;
    at.y = event.clientY - drag.y;
    apply();
  });
  const stop = () => { drag = null; drawing.classList.remove("dragging"); };
  drawing.addEventListener("pointerup", stop);
  drawing.addEventListener("pointercancel", stop);
  view.addEventListener("keydown", (event) => {
    const step = 60;
    const moves = {ArrowLeft: [step, 0], ArrowRight: [-step, 0], ArrowUp: [0, step], ArrowDown: [0, -step]};
    if (moves[event.key]) {
      at.x += moves[event.key][0];
      at.y += moves[event.key][1];
      apply();
    } else if (event.key === "+" || event.key === "=") {
      zoomAt(1.25, centre().x, centre().y);
    } else if (event.key === "-") {
      zoomAt(0.8, centre().x, centre().y);
    } else if (event.key === "0") {
      fit();
    } else {
      return;
    }
    event.preventDefault();
  });
  for (const button of document.querySelectorAll("[data-zoom]")) {
    button.addEventListener("click", () => {
      const {x, y} = centre();
      if (button.dataset.zoom === "in") zoomAt(1.25, x, y);
      else if (button.dataset.zoom === "out") zoomAt(0.8, x, y);
      else fit();
    });
  }
  // A step reached by Tab is brought into view.
  const show = (node) => {
    const px = node.x * at.k + at.x;
    const py = node.y * at.k + at.y;
    if (px < 0 || py < 0 || px > view.clientWidth || py > view.clientHeight) {
      at.x = view.clientWidth / 2 - node.x * at.k;
      at.y = view.clientHeight / 2 - node.y * at.k;
      apply();
    }
  };
  fit();
  // The side panel narrows the view (and closing it widens it): the drawing keeps its centre.
  let width = view.clientWidth;
  new ResizeObserver(() => {
    at.x += (view.clientWidth - width) / 2;
    width = view.clientWidth;
    apply();
  }).observe(view);
  return {fit, show, at};
}

// -- the side panel ------------------------------------------------------------------------------------
function row(list, term, value) {
  const dt = document.createElement("dt");
  dt.textContent = term;
  const dd = document.createElement("dd");
  if (value instanceof Node) dd.append(value); else dd.textContent = value;
  list.append(dt, dd);
}

function link(href, label, className = "") {
  const a = document.createElement("a");
  a.href = href;
  a.textContent = label;
  if (className) a.className = className;
  return a;
}

function ports(title, entries, arrow) {
  const section = document.createElement("div");
  const head = document.createElement("h3");
  head.className = "section-title";
  head.textContent = title;
  section.append(head);
  if (!entries.length) {
    const none = document.createElement("p");
    none.className = "muted";
    none.textContent = "None";
    section.append(none);
    return section;
  }
  const list = document.createElement("ul");
  list.className = "panel-ports";
  for (const [name, value] of entries) {
    const li = document.createElement("li");
    li.className = "mono";
    li.textContent = value === "" ? name : `${name} ${arrow} ${value}`;
    list.append(li);
  }
  section.append(list);
  return section;
}

function fillPanel(step) {
  document.getElementById("panel-title").textContent = step.display_name;
  const body = document.getElementById("panel-body");
  const facts = document.createElement("dl");
  facts.className = "props";
  row(facts, "Step", step.key);
  row(facts, "Component", step.component);
  row(facts, "Status", pill(step.status));
  row(facts, "Compute", step.compute);
  row(facts, "Job", step.job ? link(step.url, step.job, "mono") : "not started");
  if (step.reused_from) {
    const reused = document.createElement("span");
    const badge = document.createElement("span");
    badge.className = "reused-badge";
    badge.textContent = "Reused";
    reused.append(badge, document.createTextNode(" from "), link(step.reused_url, step.reused_from, "mono"));
    row(facts, "Reused", reused);
  }
  row(facts, "Started", step.started);
  row(facts, "Ended", step.ended);
  row(facts, "Duration", step.duration);
  const parts = [facts, ports("Inputs", Object.entries(step.inputs), "←"), ports("Outputs", Object.entries(step.outputs), ":")];
  if (step.logs_url) {
    const logs = link(step.logs_url, "Open its logs", "button primary panel-logs");
    parts.push(logs);
  }
  body.replaceChildren(...parts);
}

// -- putting it together -------------------------------------------------------------------------------
function main() {
  if (!root || !view) return;
  const source = new LiveSource(root.dataset.stream);
  let update = null;
  source.addEventListener("graph", (e) => {
    const body = JSON.parse(e.data);
    if (update) update(body); else update = start(body);
    if (body.final) document.getElementById("graph-refresh").textContent = "";
  });
  source.addEventListener("end", () => { source.close(); document.getElementById("graph-refresh").textContent = ""; });
  source.addEventListener("failed", (e) => {
    document.getElementById("graph-refresh").textContent = `The graph could not be read: ${JSON.parse(e.data).message}`;
    source.close();
  });
}

// The first graph drawn; returns what draws each later one.
function start(first) {
  let data = first;
  const g = layout(data);
  const panel = document.getElementById("step-panel");
  let opened = null; // {id, group}
  const byId = () => new Map(data.steps.map((s) => [s.id, s]));
  const open = (id, group) => {
    opened = {id, group};
    fillPanel(byId().get(id));
    panel.hidden = false;
    for (const el of view.querySelectorAll(".graph-node[aria-pressed]")) el.removeAttribute("aria-pressed");
    group.setAttribute("aria-pressed", "true");
    document.getElementById("panel-title").setAttribute("tabindex", "-1");
    document.getElementById("panel-title").focus();
  };
  const {drawing, world, steps} = draw(g, open);
  const size = g.graph();
  const pz = panZoom(drawing, world, size);
  for (const {group, node} of steps.values()) group.addEventListener("focus", () => pz.show(node));
  const close = () => {
    panel.hidden = true;
    opened?.group.removeAttribute("aria-pressed");
    opened?.group.focus();
    opened = null;
  };
  document.getElementById("panel-close").addEventListener("click", close);
  panel.addEventListener("keydown", (event) => { if (event.key === "Escape") close(); });
  view.dataset.ready = "true";

  const update = (fresh) => {
    const before = byId();
    data = fresh;
    for (const step of fresh.steps) {
      const drawn = steps.get(step.id);
      if (drawn) { drawn.node.step = step; drawStep(drawn.group, drawn.node); }
      const cell = document.querySelector(`#graph-steps tr[data-id="${CSS.escape(step.id)}"] [data-cell=status]`);
      cell?.replaceChildren(pill(step.status));
    }
    document.getElementById("pipeline-status").replaceChildren(pill(fresh.status));
    // The panel is filled again only when its step changed (a focused link in it stays).
    if (opened && JSON.stringify(before.get(opened.id)) !== JSON.stringify(byId().get(opened.id))) {
      fillPanel(byId().get(opened.id));
    }
  };
  return update;
}

main();
