// Forq admin: confirmations in a styled <dialog> instead of window.confirm (htmx's hx-confirm).
// Without <dialog> support htmx falls back to window.confirm on its own.
document.addEventListener("htmx:confirm", function (evt) {
  var question = evt.detail.question;
  var dialog = document.getElementById("confirm-dialog");
  if (!question || !dialog || typeof dialog.showModal !== "function") return;
  evt.preventDefault();
  var ok = dialog.querySelector("button[value=ok]");
  dialog.querySelector(".confirm-text").textContent = question;
  ok.textContent = evt.detail.elt.getAttribute("data-confirm-label") || "Confirm";
  ok.className = evt.detail.elt.classList.contains("danger") ? "btn danger" : "btn primary";
  dialog.returnValue = "";
  dialog.addEventListener("close", function () {
    if (dialog.returnValue === "ok") evt.detail.issueRequest(true);
  }, { once: true });
  dialog.showModal();
});
// Flash messages fade after a while; errors stay.
document.addEventListener("htmx:afterSettle", function () {
  document.querySelectorAll(".flash.success").forEach(function (el) {
    setTimeout(function () { el.classList.add("fade"); }, 6000);
  });
});
