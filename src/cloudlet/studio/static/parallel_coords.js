// A parallel-coordinates chart in SVG (a sweep's parameters against its metric): one vertical axis
// per parameter and one for the metric, a line per trial crossing each axis at its value. A numeric
// axis is scaled from its smallest to its largest value (a log-uniform parameter's logarithmically);
// a categorical one spaces its values evenly.
// Lines are coloured by the metric (blue the best, orange the worst); a line is focusable, and hover
// or focus picks it out (and calls onFocus with its id). Every label is text (textContent).

const SVG = "http://www.w3.org/2000/svg";
const BEST = [28, 126, 214];
const WORST = [232, 89, 12];
const MAX_LABEL = 22;

function svg(name, attributes = {}) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attributes)) el.setAttribute(k, String(v));
  return el;
}

function label(x, y, value, className, anchor = "middle") {
  const el = svg("text", {x, y, class: className, "text-anchor": anchor});
  const shown = String(value);
  el.textContent = shown.length > MAX_LABEL ? `${shown.slice(0, MAX_LABEL - 1)}…` : shown;
  return el;
}

export function formatNumber(value) {
  if (!Number.isFinite(value)) return String(value);
  return Math.abs(value) >= 1e4 || (value !== 0 && Math.abs(value) < 1e-3) ? value.toExponential(2) : String(+value.toPrecision(4));
}

// How an axis places a value: a number scaled to [0, 1] (1 at the top), or a category's slot.
function scaleOf(axis, rows) {
  const seen = rows.map((row) => row.values[axis.name]).filter((v) => v !== null && v !== undefined);
  if (axis.kind === "category") {
    const values = (axis.values || []).map(String);
    for (const v of seen.map(String)) if (!values.includes(v)) values.push(v);
    const slot = (v) => (values.indexOf(String(v)) + 0.5) / Math.max(values.length, 1);
    return {at: slot, ticks: values.map((v) => [slot(v), v])};
  }
  const numbers = seen.map(Number).filter(Number.isFinite);
  // A log-uniform parameter on a log axis (when every value is positive): 0.001, 0.01, 0.1 evenly.
  const log = axis.log && numbers.length && numbers.every((v) => v > 0);
  const into = log ? Math.log10 : (v) => v;
  const back = log ? (v) => 10 ** v : (v) => v;
  let low = Math.min(...numbers.map(into));
  let high = Math.max(...numbers.map(into));
  if (!numbers.length) { low = 0; high = 1; }
  if (low === high) { const pad = Math.abs(low) * 0.1 || 1; low -= pad; high += pad; }
  const at = (v) => (into(Number(v)) - low) / (high - low);
  const ticks = [0, 0.5, 1].map((t) => [t, formatNumber(back(low + t * (high - low)))]);
  return {at, ticks};
}

function colour(t) {
  const mix = WORST.map((w, i) => Math.round(w + (BEST[i] - w) * t));
  return `rgb(${mix.join(",")})`;
}

/** Draw into HOST: AXES [{name, kind: "number"|"category", log?, values?}], the last the metric;
 * ROWS [{id, label, values: {axis name: value}, metric, stopped, best}]; GOAL "minimize"|"maximize".
 * Rows lacking a value on some axis are not drawn. Returns the drawn lines by row id. */
export function parallelCoordinates(host, {axes, rows, goal, onFocus = () => {}}) {
  const complete = rows.filter((row) => axes.every((a) => row.values[a.name] !== null && row.values[a.name] !== undefined));
  const width = Math.max(480, host.clientWidth || 640);
  const height = 320;
  const top = 36;
  const bottom = height - 28;
  const left = 70;
  const right = width - 70;
  const gap = axes.length > 1 ? (right - left) / (axes.length - 1) : 0;
  const drawing = svg("svg", {viewBox: `0 0 ${width} ${height}`, class: "pc-svg", role: "group",
    "aria-label": `Parallel coordinates: ${complete.length} trials across ${axes.length} axes`});
  const scales = axes.map((axis) => scaleOf(axis, complete));
  const y = (t) => bottom - t * (bottom - top);
  const metrics = complete.map((row) => row.metric).filter(Number.isFinite);
  const low = Math.min(...metrics);
  const high = Math.max(...metrics);
  const goodness = (m) => {
    if (!Number.isFinite(m) || high === low) return 1;
    const t = (m - low) / (high - low);
    return goal === "maximize" ? t : 1 - t;
  };
  const lines = svg("g", {class: "pc-lines"});
  const drawn = new Map();
  for (const row of complete) {
    const points = axes.map((axis, i) => `${left + i * gap},${y(scales[i].at(row.values[axis.name]))}`).join(" ");
    const classes = ["pc-line", row.stopped ? "pc-stopped" : "", row.best ? "pc-best" : ""].filter(Boolean).join(" ");
    const line = svg("polyline", {points, class: classes, stroke: colour(goodness(row.metric)), tabindex: 0,
      role: "img", "data-id": row.id});
    const words = axes.map((axis) => `${axis.name} = ${row.values[axis.name]}`).join(", ");
    const state = row.stopped ? " (stopped early)" : row.best ? " (best)" : "";
    line.setAttribute("aria-label", `Trial ${row.label}${state}: ${words}`);
    const title = svg("title");
    title.textContent = `Trial ${row.label}${state}\n${axes.map((a) => `${a.name}: ${row.values[a.name]}`).join("\n")}`;
    line.append(title);
    const on = () => { lines.classList.add("pc-focus"); line.classList.add("pc-on"); onFocus(row.id); };
    const off = () => { lines.classList.remove("pc-focus"); line.classList.remove("pc-on"); onFocus(null); };
    line.addEventListener("mouseenter", on);
    line.addEventListener("mouseleave", off);
    line.addEventListener("focus", on);
    line.addEventListener("blur", off);
    drawn.set(row.id, line);
    lines.append(line);
  }
  const frame = svg("g", {class: "pc-axes", "aria-hidden": "true"});
  axes.forEach((axis, i) => {
    const x = left + i * gap;
    const group = svg("g", {class: "pc-axis"});
    group.append(svg("line", {x1: x, y1: top, x2: x, y2: bottom}));
    group.append(label(x, top - 16, axis.name, "pc-axis-name"));
    for (const [t, text] of scales[i].ticks) {
      group.append(svg("line", {x1: x - 4, y1: y(t), x2: x, y2: y(t)}));
      group.append(label(x - 7, y(t) + 4, text, "pc-tick", "end"));
    }
    frame.append(group);
  });
  drawing.append(frame, lines);
  // The best line on top of the others.
  for (const line of drawn.values()) if (line.classList.contains("pc-best")) lines.append(line);
  host.replaceChildren(drawing);
  return drawn;
}
