// Compute pages: the create form's type switch, its YAML editor and file loader, a delete's
// confirmation.
// An ES module (no inline script anywhere: the CSP forbids it).
for (const radio of document.querySelectorAll("input[data-type-switch]")) {
  // The form's fields differ by type: reload it for the other type (the size list too).
  radio.addEventListener("change", () => {
    const url = new URL(window.location.href);
    url.searchParams.set("type", radio.value);
    window.location.assign(url.toString());
  });
}
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
for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
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
