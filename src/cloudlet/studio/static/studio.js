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

// A page's tabs (<nav class="tabs">: links, each tab its own URL) also move with the arrow keys,
// Home and End, as WAI-ARIA's tabs pattern has it; Enter follows the focused one. Every link
// stays in the Tab order too (they are links, and work without script).
document.addEventListener("keydown", (event) => {
  const link = event.target.closest?.("nav.tabs a");
  if (!link || event.altKey || event.ctrlKey || event.metaKey) return;
  const links = [...link.closest("nav.tabs").querySelectorAll("a")];
  const at = links.indexOf(link);
  const next = {
    ArrowRight: links[(at + 1) % links.length],
    ArrowLeft: links[(at - 1 + links.length) % links.length],
    Home: links[0],
    End: links[links.length - 1],
  }[event.key];
  if (next) {
    event.preventDefault();
    next.focus();
  }
});

// A form with data-confirm asks first, in a modal <dialog> (focus stays inside it; Escape or
// the dismiss button closes it and focus returns to the button pressed). The question and the
// button's words are set as text, never as HTML. A submit button's own data-confirm (a form with
// several actions: the job list's row and bulk Cancel) is asked instead of the form's.
let confirmDialog = null;

function dialogFor() {
  if (confirmDialog) return confirmDialog;
  const dialog = document.createElement("dialog");
  dialog.className = "confirm";
  dialog.setAttribute("aria-labelledby", "confirm-question");
  const question = document.createElement("p");
  question.id = "confirm-question";
  const actions = document.createElement("form");
  actions.method = "dialog";
  actions.className = "confirm-actions";
  const dismiss = document.createElement("button");
  dismiss.value = "no";
  dismiss.className = "button";
  dismiss.textContent = "Go back";
  const accept = document.createElement("button");
  accept.value = "yes";
  accept.className = "button danger";
  actions.append(dismiss, accept);
  dialog.append(question, actions);
  document.body.append(dialog);
  confirmDialog = dialog;
  return dialog;
}

document.addEventListener("submit", (event) => {
  const form = event.target;
  if (!(form instanceof HTMLFormElement)) return;
  const submitter = event.submitter;
  const asking = submitter && submitter.dataset.confirm ? submitter : form;
  if (!asking.dataset.confirm) return;
  if (form.dataset.confirmed === "yes") {
    delete form.dataset.confirmed;
    return;
  }
  event.preventDefault();
  const dialog = dialogFor();
  dialog.querySelector("p").textContent = asking.dataset.confirm;
  const [dismiss, accept] = dialog.querySelectorAll("button");
  accept.textContent = asking.dataset.confirmYes || "Confirm";
  dialog.returnValue = "";
  dialog.addEventListener(
    "close",
    () => {
      if (dialog.returnValue === "yes") {
        form.dataset.confirmed = "yes";
        form.requestSubmit(submitter && form.contains(submitter) ? submitter : undefined);
      } else {
        (submitter || form.querySelector("button"))?.focus();
      }
    },
    { once: true },
  );
  dialog.showModal();
  dismiss.focus(); // the safe answer first (WAI-ARIA's alert dialog)
});

// A region that htmx re-draws by itself (a list from its event stream) while the keyboard is in
// it keeps the focus on the same control: htmx restores the focus only to an element with an id,
// and without this the focus would fall to the page's body at each re-draw (the next Tab starting
// over from the top).
const focusKey = (el) =>
  [el.tagName, el.getAttribute("href"), el.getAttribute("formaction"), el.name, el.value, el.textContent.trim()].join("|");
let keptFocus = null;
const keepFocusIn = (target) => {
  const active = document.activeElement;
  keptFocus = null;
  if (target && active && active !== document.body && !active.id && target.id && target.contains(active)) {
    keptFocus = { region: target.id, key: focusKey(active) };
  }
};
document.addEventListener("htmx:beforeSwap", (event) => keepFocusIn(event.detail.target));
// A region drawn again from its event stream (sse-swap): the SSE extension swaps without a
// beforeSwap, and announces the message on the element it swaps instead.
document.addEventListener("htmx:sseBeforeMessage", (event) => keepFocusIn(event.target));
document.addEventListener("htmx:afterSettle", () => {
  if (!keptFocus) return;
  const { region, key } = keptFocus;
  keptFocus = null;
  if (document.activeElement && document.activeElement !== document.body) return; // moved on
  const match = [...(document.getElementById(region)?.querySelectorAll("a[href], button, input, select, textarea") ?? [])]
    .find((el) => focusKey(el) === key);
  match?.focus({ preventScroll: true });
});
