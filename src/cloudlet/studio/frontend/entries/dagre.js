// Pipeline graph layout.
export { default as dagre } from "@dagrejs/dagre";
