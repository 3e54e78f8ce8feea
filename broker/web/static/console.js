// Polls the page's own URL with fragment=1 and swaps the main section: the console updates
// itself without a reload. A form being typed into is left alone until it loses focus.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  var every = parseInt(document.body.dataset.refreshMs, 10) || 2000;
  function url() {
    var u = new URL(window.location.href);
    u.searchParams.set("fragment", "1");
    return u.toString();
  }
  function busy() {
    var a = document.activeElement;
    return a && main.contains(a) && (a.tagName === "INPUT" || a.tagName === "SELECT");
  }
  function tick() {
    if (busy()) { return setTimeout(tick, every); }
    fetch(url(), {credentials: "same-origin", cache: "no-store"})
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) {
        main.innerHTML = html;
        live.classList.remove("stale");
        live.dataset.updated = String(Date.now());
      })
      .catch(function () { live.classList.add("stale"); })
      .finally(function () { setTimeout(tick, every); });
  }
  setTimeout(tick, every);
})();
