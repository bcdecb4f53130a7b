// Usage and cost (usage.html): the cost per day of the biggest spenders, stacked, drawn by uPlot
// from the page's own data (data-chart: JSON in an attribute, escaped by the server; no fetch).
const COLOURS = ["#0f62c6", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#1098ad", "#868e96"];

// Enough decimals to tell the ticks apart (a test's minutes of a node cost fractions of a cent).
function decimals(ticks) {
  const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 1;
  return Math.min(6, Math.max(2, Math.ceil(-Math.log10(step || 1))));
}

async function draw() {
  const host = document.getElementById("usage-chart");
  if (!host) return;
  const {uPlot} = await import("./vendor/uplot.min.js");
  const {days, series} = JSON.parse(host.dataset.chart);
  // Stacked: each series is drawn as the running total of those before it and itself; drawn
  // last first, so each band shows in front of the taller ones behind it.
  const running = new Array(days.length).fill(0);
  const stacked = series.map((s) => s.cost.map((v, i) => (running[i] += v)));
  const bars = uPlot.paths.bars({size: [0.7, 60]});
  const order = series.map((_, i) => i).reverse();
  const options = {
    width: Math.max(320, host.clientWidth),
    height: 300,
    scales: {x: {time: true}},
    axes: [{}, {label: "USD", size: 70, values: (u, ticks) => ticks.map((t) => `$${t.toFixed(decimals(ticks))}`)}],
    series: [
      {label: "day", value: (u, v) => (v == null ? "" : new Date(v * 1000).toISOString().slice(0, 10))},
      ...order.map((i) => ({
        label: series[i].name,
        stroke: COLOURS[i % COLOURS.length],
        fill: COLOURS[i % COLOURS.length] + "cc",
        paths: bars,
        points: {show: false},
        // The legend shows the day's own cost, not the running total.
        value: (u, v, si, di) => (di == null ? "" : `$${series[i].cost[di].toFixed(2)}`),
      })),
    ],
  };
  const plot = new uPlot(options, [days, ...order.map((i) => stacked[i])], host);
  host.dataset.drawn = String(series.length);
  window.addEventListener("resize", () => plot.setSize({width: Math.max(320, host.clientWidth), height: 300}));
}

draw();
