// Compute pages: the create form's type switch and YAML file loader, a delete's confirmation.
// An ES module (no inline script anywhere: the CSP forbids it).
for (const radio of document.querySelectorAll("input[data-type-switch]")) {
  // The form's fields differ by type: reload it for the other type (the size list too).
  radio.addEventListener("change", () => {
    const url = new URL(window.location.href);
    url.searchParams.set("type", radio.value);
    window.location.assign(url.toString());
  });
}
for (const input of document.querySelectorAll("input[data-yaml-into]")) {
  input.addEventListener("change", async () => {
    const file = input.files && input.files[0];
    const target = document.getElementById(input.dataset.yamlInto);
    if (file && target) target.value = await file.text();
  });
}
for (const form of document.querySelectorAll("form[data-confirm]")) {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
}
