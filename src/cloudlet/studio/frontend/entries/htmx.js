// Every studio page: htmx 2 and its server-sent-events extension (ES module order: htmx first).
import "./htmx-global.js";
import "htmx-ext-sse";
