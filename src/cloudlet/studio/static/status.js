// A status as the studio draws it in script (the same pills as partials/status.html): its tone and
// its pill. The text goes in as a text node, never as HTML.
const TONES = {
  Completed: "ok", Succeeded: "ok", Running: "run", Starting: "run", Preparing: "run",
  Provisioning: "run", Finalizing: "run", Queued: "wait", NotStarted: "wait", Failed: "bad",
  Canceled: "off", CancelRequested: "off", Skipped: "off",
};

export const tone = (status) => TONES[status] || "off";

export function pill(status) {
  const span = document.createElement("span");
  span.className = `pill pill-${tone(status)}`;
  const dot = document.createElement("span");
  dot.className = "dot";
  dot.setAttribute("aria-hidden", "true");
  span.append(dot, document.createTextNode(status));
  return span;
}
