// forqapp's copy buttons (a new API key's secret and token): <button data-copy="ELEMENT-ID"> copies
// that element's text. The clipboard API where the page may use it (HTTPS, or localhost); elsewhere
// the text is selected and copied the old way, or left selected for Ctrl+C. A static file: the staff
// pages' Content-Security-Policy allows no inline script (shared by the admin and the HTMX pages; a
// delegated listener, so buttons an htmx swap brings in work too).
(function () {
  "use strict";

  function select(source) {
    var range = document.createRange();
    range.selectNodeContents(source);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function copyBySelection(source) {
    select(source);
    try {
      return document.execCommand("copy");
    } catch (e) {
      return false;
    }
  }

  function say(button, text) {
    if (!button.hasAttribute("data-label")) button.setAttribute("data-label", button.textContent);
    button.textContent = text;
    clearTimeout(button.forqTimer);
    button.forqTimer = setTimeout(function () {
      button.textContent = button.getAttribute("data-label");
    }, 2500);
  }

  document.addEventListener("click", function (evt) {
    var button = evt.target.closest ? evt.target.closest("button[data-copy]") : null;
    if (!button) return;
    evt.preventDefault();
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var text = source.textContent.trim();
    var fallback = function () {
      say(button, copyBySelection(source) ? "Copied" : "Selected: press Ctrl+C");
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { say(button, "Copied"); }, fallback);
    } else {
      fallback();
    }
  });
})();
