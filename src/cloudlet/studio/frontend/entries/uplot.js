// Metric charts (uPlot); its stylesheet is copied beside the bundle as uplot.min.css.
export { default as uPlot } from "uplot";
