// The asset pages: YAML shown read-only in the editor (a <pre class="yaml-view"> stays the text
// without script), the register form's YAML editor, and a data asset's upload: each chosen file
// is sent at once (raw bytes, the session's CSRF header) into the form's upload folder.
// CodeMirror (editor.js, most of a page's script) is imported only by a page that shows YAML: the
// lists and a data or model form without a YAML field do not pay for it.
import { csrfHeaders } from "./forms.js";

const views = document.querySelectorAll("pre.yaml-view");
const source = document.getElementById("yaml");
const editorHost = document.getElementById("yaml-editor");
const { yamlEditor } = views.length || (source && editorHost) ? await import("./editor.js") : {};

for (const pre of views) {
  const host = document.createElement("div");
  host.className = "editor mounted";
  pre.after(host);
  yamlEditor(host, pre.textContent, { readOnly: true, label: pre.dataset.label || "YAML" });
  pre.hidden = true;
}

if (source && editorHost) {
  const view = yamlEditor(editorHost, source.value, { label: editorHost.dataset.label });
  source.hidden = true;
  editorHost.classList.add("mounted");
  document.getElementById("asset-form")?.addEventListener("submit", () => {
    source.value = view.state.doc.toString();
  });
  document.getElementById("yaml-file")?.addEventListener("change", async (event) => {
    const file = event.target.files?.[0];
    if (!file) return;
    const text = await file.text();
    view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
  });
}

async function uploadAll(input, fromFolder) {
  const status = document.getElementById("upload-status");
  // Each choice is a new upload folder (an upload's files are written once).
  const batch = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
  document.getElementById("f-upload").value = batch;
  const uploaded = document.getElementById("f-uploaded");
  const count = document.getElementById("f-count");
  const submit = document.getElementById("register");
  const files = [...(input.files || [])];
  if (!files.length) return;
  submit.disabled = true;
  uploaded.value = "";
  count.value = String(files.length);
  let done = 0;
  try {
    for (const file of files) {
      // A folder's files come as "folder/a/b.csv": the asset is the folder's contents.
      const relative = fromFolder ? file.webkitRelativePath.split("/").slice(1).join("/") : file.name;
      const url = `${input.dataset.upload}?${new URLSearchParams({ batch, path: relative })}`;
      status.textContent = `Uploading ${relative} (${done + 1} of ${files.length})…`;
      const answer = await fetch(url, {
        method: "POST",
        body: file,
        headers: { ...csrfHeaders(), "Content-Type": "application/octet-stream" },
        credentials: "same-origin",
      });
      const body = await answer.json();
      if (!answer.ok) throw new Error(`${relative}: ${body.error || `refused (${answer.status})`}`);
      done += 1;
      uploaded.value = files.length === 1 ? relative : `${done} files`;
    }
    status.textContent = `Uploaded ${done} file${done === 1 ? "" : "s"}.`;
  } catch (error) {
    uploaded.value = "";
    status.textContent = `The upload failed: ${error.message}`;
  } finally {
    submit.disabled = false;
  }
}

document.getElementById("data-files")?.addEventListener("change", (event) => uploadAll(event.target, false));
document.getElementById("data-folder")?.addEventListener("change", (event) => uploadAll(event.target, true));
