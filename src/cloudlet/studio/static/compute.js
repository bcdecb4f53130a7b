// Compute pages: the create form's YAML editor and file loader (the type switch is htmx's; a
// delete's confirmation is studio.js's, as every form with data-confirm).
// An ES module (no inline script anywhere: the CSP forbids it).
// The size picker is redrawn when the location, tier or a node count changes (htmx): a size chosen
// while that request was on its way stays chosen (the request carried the choice from before).
let chosenSize = null;
document.addEventListener("htmx:beforeSwap", (event) => {
  const id = event.detail.target.id;
  if (id === "sizes" || id === "type-fields") {
    chosenSize = document.querySelector('#sizes input[name="size"]:checked')?.value ?? null;
  }
});
document.addEventListener("htmx:afterSwap", () => {
  if (chosenSize === null) return;
  const radio = [...document.querySelectorAll('#sizes input[name="size"]')].find((r) => r.value === chosenSize);
  if (radio && !radio.disabled) radio.checked = true;
  chosenSize = null;
});
// The YAML box becomes the studio's editor (CodeMirror); the text area stays the form's field,
// filled from the editor when the form is sent (without script, the text area is the editor).
// Listeners first: the editor's module loads after them.
const yamlViews = new Map();
for (const input of document.querySelectorAll("input[data-yaml-into]")) {
  input.addEventListener("change", async () => {
    const file = input.files && input.files[0];
    if (!file) return;
    const text = await file.text();
    const view = yamlViews.get(input.dataset.yamlInto);
    if (view) view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
    else document.getElementById(input.dataset.yamlInto).value = text;
  });
}
for (const area of document.querySelectorAll("textarea[data-yaml-editor]")) {
  const { yamlEditor } = await import("./editor.js");
  const host = document.createElement("div");
  host.className = "yaml-host";
  area.before(host);
  area.hidden = true;
  const view = yamlEditor(host, area.value);
  view.contentDOM.setAttribute("aria-label", area.dataset.yamlEditor);
  view.scrollDOM.tabIndex = 0; // a long line scrolls it: the keyboard must reach it (axe)
  yamlViews.set(area.id, view);
  area.form.addEventListener("submit", () => {
    area.value = view.state.doc.toString();
  });
}
