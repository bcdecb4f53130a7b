// The studio's own script (an ES module; no inline script anywhere: the CSP forbids it).
import {LiveSource} from "./live.js";

// htmx's SSE extension (the live tables) makes its streams as LiveSources: let go while hidden.
if (window.htmx) window.htmx.createEventSource = (url) => new LiveSource(url);

// Menus (<details data-menu>) close on Escape, on a click outside and when focus leaves them.
for (const menu of document.querySelectorAll("details[data-menu]")) {
  menu.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && menu.open) {
      menu.open = false;
      menu.querySelector("summary")?.focus();
    }
  });
  menu.addEventListener("focusout", (event) => {
    if (!menu.contains(event.relatedTarget)) menu.open = false;
  });
}
document.addEventListener("click", (event) => {
  for (const menu of document.querySelectorAll("details[data-menu][open]")) {
    if (!menu.contains(event.target)) menu.open = false;
  }
});
