// The studio's YAML editor (CodeMirror 6). It lives in a shadow root: there CodeMirror's styles
// are constructed stylesheets, which the CSP (style-src 'self') allows; mounted on the document it
// would add a <style> element, which the CSP refuses.
import { EditorState, EditorView, basicSetup, yaml } from "./vendor/codemirror.min.js";

export function yamlEditor(host, doc, { readOnly = false } = {}) {
  const root = host.shadowRoot ?? host.attachShadow({ mode: "open" });
  return new EditorView({
    doc,
    extensions: [basicSetup, yaml(), EditorState.readOnly.of(readOnly)],
    parent: root,
    root,
  });
}
