// htmx as the global its extensions expect (htmx-ext-sse registers itself on window.htmx).
import htmx from "htmx.org";
window.htmx = htmx;
export default htmx;
