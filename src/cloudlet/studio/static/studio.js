// The studio's own script (an ES module; no inline script anywhere: the CSP forbids it).
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
// button's words are set as text, never as HTML.
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
  if (!(form instanceof HTMLFormElement) || !form.dataset.confirm) return;
  if (form.dataset.confirmed === "yes") {
    delete form.dataset.confirmed;
    return;
  }
  event.preventDefault();
  const submitter = event.submitter;
  const dialog = dialogFor();
  dialog.querySelector("p").textContent = form.dataset.confirm;
  const [dismiss, accept] = dialog.querySelectorAll("button");
  accept.textContent = form.dataset.confirmYes || "Confirm";
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
