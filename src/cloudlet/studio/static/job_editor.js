// The job YAML editor (submit, clone, a job's YAML tab): CodeMirror replaces the textarea, which
// stays the form's field (filled from the editor on submit). A .yml file is read into the editor;
// a code archive is uploaded at once and its snapshot id kept in the form's `code` field.
// An error the server placed on a line (data-error-line) selects that line.
import { yamlEditor } from "./editor.js";

const host = document.getElementById("yaml-editor");
const source = document.getElementById("yaml");

if (host && source) {
  const readOnly = host.dataset.readonly === "true";
  const view = yamlEditor(host, source.value, { readOnly, label: host.dataset.label });
  source.hidden = true;
  host.classList.add("mounted");
  const setText = (text) => view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });

  const line = Number(host.dataset.errorLine || 0);
  if (line > 0 && line <= view.state.doc.lines) {
    const at = view.state.doc.line(line);
    view.dispatch({ selection: { anchor: at.from, head: at.to }, scrollIntoView: true });
    view.focus(); // the keyboard is where the fix is
  }

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
    const help = document.getElementById("code-help");
    const field = document.getElementById("code");
    const submit = document.getElementById("submit-job");
    if (!file) return;
    const headers = JSON.parse(document.body.getAttribute("hx-headers") || "{}");
    help.textContent = `Uploading ${file.name}…`;
    submit.disabled = true;
    try {
      const answer = await fetch(archive.dataset.upload, {
        method: "POST",
        body: file,
        headers: { ...headers, "Content-Type": "application/octet-stream" },
        credentials: "same-origin",
      });
      const body = await answer.json();
      if (!answer.ok) throw new Error(body.error || `upload refused (${answer.status})`);
      field.value = body.code;
      help.textContent = `Uploaded ${file.name}: ${body.code}`;
    } catch (error) {
      field.value = "";
      help.textContent = `The archive was not uploaded: ${error.message}`;
    } finally {
      submit.disabled = false;
    }
  });
}
