// The studio's YAML editor (CodeMirror 6). It lives in a shadow root: there CodeMirror's styles
// are constructed stylesheets, which the CSP (style-src 'self') allows; mounted on the document it
// would add a <style> element, which the CSP refuses.
import { EditorState, EditorView, basicSetup, yaml } from "./vendor/codemirror.min.js";

export function yamlEditor(host, doc, { readOnly = false, label = "YAML" } = {}) {
  const root = host.shadowRoot ?? host.attachShadow({ mode: "open" });
  return new EditorView({
    doc,
    // The editable area is a textbox for assistive technology: it needs a name. Long lines wrap:
    // a region that scrolls sideways needs a keyboard stop of its own (axe), and a line of a job
    // (a command, a URL) is read whole.
    extensions: [
      basicSetup,
      yaml(),
      EditorState.readOnly.of(readOnly),
      EditorView.contentAttributes.of({ "aria-label": label }),
      EditorView.lineWrapping,
      // The keyboard's focus shows as on every other control (studio.css's :focus-visible ring);
      // the page's stylesheet does not reach into the shadow root.
      EditorView.theme({
        "&.cm-focused": { outline: "2px solid #0f62c6", outlineOffset: "2px" },
        ".cm-scroller:focus-visible": { outline: "2px solid #0f62c6", outlineOffset: "-2px" },
      }),
    ],
    parent: root,
    root,
  });
}
