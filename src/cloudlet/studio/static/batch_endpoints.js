// Batch endpoints: YAML editors (CodeMirror over a textarea that stays the form's
// field), a .yml file read into its editor, a code archive uploaded at once (its snapshot id kept
// in a hidden field), and a folder uploaded at once: an archive as it is, or a folder picked with
// webkitdirectory packed here into a tar.gz (ustar + CompressionStream), its URI kept in a hidden
// field. Text from the server or the user is only ever set as text. CodeMirror is imported only
// by a page that shows an editor (the lists, and an endpoint's page until its YAML form is opened,
// do without its 140 KB).

import { postBytes, selectLine } from "./forms.js";

// An editor inside a closed <details> (an endpoint's "Add a deployment from YAML") is made when
// it is first opened: CodeMirror is then imported only by a page that shows an editor.
async function mount(host) {
  const source = document.getElementById(host.dataset.source);
  if (!source) return;
  const { yamlEditor } = await import("./editor.js");
  const view = yamlEditor(host, source.value, { label: host.dataset.label });
  source.hidden = true;
  host.classList.add("mounted");
  const form = host.closest("form");
  form?.addEventListener("submit", () => {
    source.value = view.state.doc.toString();
  });
  form?.querySelector(".yaml-file")?.addEventListener("change", async (event) => {
    const file = event.target.files?.[0];
    if (file) view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: await file.text() } });
  });
  selectLine(view, Number(host.dataset.errorLine || 0));
}
for (const host of document.querySelectorAll(".editor[data-source]")) {
  const closed = host.closest("details:not([open])");
  if (closed) closed.addEventListener("toggle", () => mount(host), { once: true });
  else await mount(host);
}

// -- a tar.gz of picked files, in the browser ----------------------------------------------------
const encoder = new TextEncoder();

function put(block, offset, length, text) {
  block.set(encoder.encode(text).subarray(0, length), offset);
}

function octal(value, width) {
  return value.toString(8).padStart(width - 1, "0") + "\0";
}

function header(path, size) {
  const block = new Uint8Array(512);
  let name = path;
  let prefix = "";
  if (encoder.encode(path).length > 100) {
    const cut = path.lastIndexOf("/", 155);
    if (cut < 0 || encoder.encode(path.slice(cut + 1)).length > 100) throw new Error(`path too long: ${path}`);
    prefix = path.slice(0, cut);
    name = path.slice(cut + 1);
  }
  put(block, 0, 100, name);
  put(block, 100, 8, "0000644\0");
  put(block, 108, 8, "0000000\0");
  put(block, 116, 8, "0000000\0");
  put(block, 124, 12, octal(size, 12));
  put(block, 136, 12, octal(0, 12));
  put(block, 148, 8, "        ");
  put(block, 156, 1, "0");
  put(block, 257, 6, "ustar\0");
  put(block, 263, 2, "00");
  put(block, 345, 155, prefix);
  const sum = block.reduce((total, byte) => total + byte, 0);
  put(block, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return block;
}

async function tarGz(entries) {
  const parts = [];
  for (const [path, file] of entries) {
    const body = new Uint8Array(await file.arrayBuffer());
    parts.push(header(path, body.length), body, new Uint8Array((512 - (body.length % 512)) % 512));
  }
  parts.push(new Uint8Array(1024));
  const stream = new Blob(parts).stream().pipeThrough(new CompressionStream("gzip"));
  return new Blob([await new Response(stream).arrayBuffer()]);
}

// What to send for the files picked in INPUT: [body, folder name].
async function packed(input) {
  const files = [...input.files];
  const relative = files.map((f) => f.webkitRelativePath || f.name);
  if (files.length === 1 && !files[0].webkitRelativePath && /\.(zip|tar\.gz|tgz)$/i.test(files[0].name)) {
    return [files[0], files[0].name.replace(/\.(zip|tar\.gz|tgz)$/i, "")];
  }
  const top = relative[0].includes("/") ? relative[0].split("/")[0] : "upload";
  const entries = files.map((f, i) => [relative[i].startsWith(`${top}/`) ? relative[i].slice(top.length + 1) : relative[i], f]);
  return [await tarGz(entries), top];
}

const upload = (input, body, query) => postBytes(input.dataset.upload + query, body);

function uploader(input, send) {
  input.addEventListener("change", async () => {
    if (!input.files?.length) return;
    const field = document.getElementById(input.dataset.field);
    const help = document.getElementById(input.getAttribute("aria-describedby"));
    const submit = input.closest("form")?.querySelector("button[type=submit]");
    help.textContent = `Uploading ${input.files.length} file(s)…`;
    if (submit) submit.disabled = true;
    try {
      const [value, said] = await send(input);
      field.value = value;
      help.textContent = said;
      field.dispatchEvent(new Event("change", { bubbles: true }));
    } catch (error) {
      field.value = "";
      help.textContent = `Not uploaded: ${error.message}`;
    } finally {
      if (submit) submit.disabled = false;
    }
  });
}

for (const input of document.querySelectorAll(".code-archive")) {
  uploader(input, async (picked) => {
    const found = await upload(picked, picked.files[0], "");
    return [found.code, `Uploaded ${picked.files[0].name}: ${found.code}`];
  });
}

for (const input of document.querySelectorAll(".folder-upload")) {
  uploader(input, async (picked) => {
    const [body, folder] = await packed(picked);
    const safe = folder.replace(/[^A-Za-z0-9._-]/g, "_").replace(/^[^A-Za-z0-9]+/, "").slice(0, 100) || "upload";
    const found = await upload(picked, body, `?folder=${encodeURIComponent(safe)}`);
    const uploadRadio = document.getElementById(picked.dataset.select || "");
    if (uploadRadio) uploadRadio.checked = true;
    return [found.uri, `Uploaded ${folder} (${picked.files.length} file(s)): ${found.uri}`];
  });
}
