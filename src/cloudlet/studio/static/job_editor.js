// The job YAML editor (submit, clone, a job's YAML tab): CodeMirror replaces the textarea, which
// stays the form's field (filled from the editor on submit). A .yml file is read into the editor;
// a code archive is uploaded at once and its snapshot id kept in the form's `code` field.
// An error the server placed on a line (data-error-line) selects that line.
import { yamlEditor } from "./editor.js";
import { selectLine, uploadArchive } from "./forms.js";

const host = document.getElementById("yaml-editor");
const source = document.getElementById("yaml");

if (host && source) {
  const readOnly = host.dataset.readonly === "true";
  const view = yamlEditor(host, source.value, { readOnly, label: host.dataset.label });
  source.hidden = true;
  host.classList.add("mounted");
  const setText = (text) => view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });

  selectLine(view, Number(host.dataset.errorLine || 0));

  const form = document.getElementById("job-form");
  form?.addEventListener("submit", () => {
    source.value = view.state.doc.toString();
  });

  document.getElementById("yaml-file")?.addEventListener("change", async (event) => {
    const file = event.target.files?.[0];
    if (file) setText(await file.text());
  });

  const archive = document.getElementById("code-archive");
  archive?.addEventListener("change", async () => {
    const file = archive.files?.[0];
    if (!file) return;
    const help = document.getElementById("code-help");
    await uploadArchive(archive.dataset.upload, file, document.getElementById("code"), help, document.getElementById("submit-job"));
  });
}
