// Refreshes every element with a data-live URL: fetches the fragment and swaps it in, unless
// the reader is busy there (a form field focused, or the pointer over it). No framework.
(function () {
  "use strict";
  var period = 3000;
  function busy(element) {
    return element.contains(document.activeElement) || element.matches(":hover");
  }
  function refresh(element) {
    if (document.hidden || busy(element)) {
      return;
    }
    fetch(element.dataset.live, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(response.status + " " + response.statusText);
        }
        return response.text();
      })
      .then(function (html) {
        element.innerHTML = html;
        element.removeAttribute("data-stale");
      })
      .catch(function () {
        element.setAttribute("data-stale", "yes");
      });
  }
  function start() {
    var elements = document.querySelectorAll("[data-live]");
    if (elements.length === 0) {
      return;
    }
    window.setInterval(function () {
      elements.forEach(refresh);
    }, period);
  }
  document.addEventListener("DOMContentLoaded", start);
})();
