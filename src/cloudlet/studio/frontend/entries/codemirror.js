// The YAML editor: CodeMirror 6 with its basic setup and YAML mode.
export { EditorView, basicSetup } from "codemirror";
export { EditorState } from "@codemirror/state";
export { yaml } from "@codemirror/lang-yaml";
