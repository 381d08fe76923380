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
  // A dangerous action: the element asking (a button) is .danger, or the form's submit button is.
  var elt = evt.detail.elt;
  var danger = elt.classList.contains("danger") || (elt.tagName === "FORM" && elt.querySelector("button.danger"));
  ok.className = danger ? "btn danger" : "btn primary";
  dialog.returnValue = "";
  dialog.addEventListener("close", function () {
    if (dialog.returnValue === "ok") evt.detail.issueRequest(true);
  }, { once: true });
  dialog.showModal();
});
// A refresh marked data-hold-while-dialog waits while a confirmation is open (it would replace the
// row being confirmed). Here rather than as an hx-trigger filter: htmx evaluates filters, and the
// pages' Content-Security-Policy allows no eval (forqapp.ui.csp).
document.addEventListener("htmx:beforeRequest", function (evt) {
  if (evt.detail.elt.hasAttribute("data-hold-while-dialog") && document.querySelector("dialog[open]")) {
    evt.preventDefault();
  }
});
// Flash messages fade after a while; errors stay.
document.addEventListener("htmx:afterSettle", function () {
  document.querySelectorAll(".flash.success").forEach(function (el) {
    setTimeout(function () { el.classList.add("fade"); }, 6000);
  });
});
// An action the server could not do (a 5xx, or no answer at all): htmx swaps nothing then, so say
// it in the flash area rather than leave the click without a trace. (Answers the pages expect,
// such as a missing permission or a database that cannot serve, come as a flash of their own.)
function forqFlashError(text) {
  var area = document.getElementById("flash");
  if (!area) return;
  var el = document.createElement("div");
  el.className = "flash error";
  el.setAttribute("role", "alert");
  el.setAttribute("data-testid", "flash");
  el.textContent = text;
  area.replaceChildren(el);
}
document.addEventListener("htmx:responseError", function (evt) {
  var status = evt.detail.xhr.status;
  forqFlashError(status === 403
    ? "Not done: the page's login or security token is out of date (you logged out or in elsewhere). Reload the page and try again."
    : "Not done: the server answered " + status + ". Reload the page and try again.");
});
document.addEventListener("htmx:sendError", function () {
  forqFlashError("Not done: the server could not be reached. Check the connection and try again.");
});
