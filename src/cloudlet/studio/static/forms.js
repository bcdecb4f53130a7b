// What the studio's editor forms share (job submit, endpoint and deployment forms, batch
// endpoints, asset registration): the CSRF header for a script's POST, a file's bytes posted to
// an upload route (its JSON answer, or its refusal as an Error), a code archive uploaded at once
// into a form's field, and the line the server marked as wrong selected in an editor.
// Messages are set as text, never HTML.

export const csrfHeaders = () => JSON.parse(document.body.getAttribute("hx-headers") || "{}");

export async function postBytes(url, body) {
  const answer = await fetch(url, {
    method: "POST",
    body,
    headers: { ...csrfHeaders(), "Content-Type": "application/octet-stream" },
    credentials: "same-origin",
  });
  const found = await answer.json();
  if (!answer.ok) throw new Error(found.error || `upload refused (${answer.status})`);
  return found;
}

// FILE posted to URL as a code archive; its snapshot id goes into FIELD, what happened into HELP,
// and SUBMIT waits meanwhile (a form sent mid-upload would lack the code).
export async function uploadArchive(url, file, field, help, submit) {
  help.textContent = `Uploading ${file.name}…`;
  if (submit) submit.disabled = true;
  try {
    const found = await postBytes(url, file);
    field.value = found.code;
    help.textContent = `Uploaded ${file.name}: ${found.code}`;
  } catch (error) {
    field.value = "";
    help.textContent = `The archive was not uploaded: ${error.message}`;
  } finally {
    if (submit) submit.disabled = false;
  }
}

// The editor's LINE (1-based; the server's data-error-line) selected and focused: the keyboard
// is where the fix is.
export function selectLine(view, line) {
  if (line > 0 && line <= view.state.doc.lines) {
    const at = view.state.doc.line(line);
    view.dispatch({ selection: { anchor: at.from, head: at.to }, scrollIntoView: true });
    view.focus();
  }
}
