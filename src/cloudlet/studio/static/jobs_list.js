// The job list: "select all" and the bulk Cancel button (enabled with a count when rows are
// ticked). Delegated from the document, so it keeps working when htmx swaps the results in.
function refresh() {
  const boxes = [...document.querySelectorAll('#bulk input[name="name"]')];
  const ticked = boxes.filter((box) => box.checked).length;
  const button = document.getElementById("bulk-cancel");
  if (button) {
    button.disabled = ticked === 0;
    button.textContent = ticked ? `Cancel ${ticked} selected` : "Cancel selected";
  }
  const all = document.getElementById("select-all");
  if (all) {
    all.checked = boxes.length > 0 && ticked === boxes.length;
    all.indeterminate = ticked > 0 && ticked < boxes.length;
  }
}

document.addEventListener("change", (event) => {
  const target = event.target;
  if (target.id === "select-all") {
    for (const box of document.querySelectorAll('#bulk input[name="name"]')) box.checked = target.checked;
  }
  if (target.closest && target.closest("#bulk")) refresh();
});
document.addEventListener("htmx:afterSwap", refresh);
refresh();

// A filter change asks for the results with only the fields that say something: the URL pushed
// (and shared) reads `?status=Failed`, not every empty box of the form.
document.addEventListener("htmx:configRequest", (event) => {
  const form = event.detail.formData; // htmx 2: the FormData its parameters proxy wraps
  for (const [key, value] of [...form.entries()]) {
    if (value === "" || (key === "size" && value === "50")) form.delete(key);
  }
});
