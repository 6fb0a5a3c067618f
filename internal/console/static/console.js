// Platform console: switch scope on change, and poll a redrive's progress
// (count, rate, ETA) while it is not finished; a state change reloads the
// page so its buttons match the new state.
(function () {
  "use strict";
  var sel = document.getElementById("scope-select");
  if (sel) {
    sel.addEventListener("change", function () { sel.form.submit(); });
  }
  var req = document.getElementById("request");
  if (!req || req.dataset.terminal === "true") {
    return;
  }
  var state = document.getElementById("state").textContent;
  var url = "/console/api/status?id=" + encodeURIComponent(req.dataset.id) +
    "&scope=" + encodeURIComponent(req.dataset.scope || "");
  function set(id, v) {
    var el = document.getElementById(id);
    if (el) { el.textContent = v; }
  }
  function poll() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (p) {
        if (!p) { return; }
        set("sent", p.sent);
        set("total", p.total);
        set("skipped", p.skipped);
        set("refailed", p.refailed);
        set("achieved", p.rate.toFixed(1));
        set("eta", p.eta || "-");
        set("phase", p.phase || "");
        if (p.state !== state) {
          window.location.replace(window.location.pathname + "?id=" + encodeURIComponent(req.dataset.id) +
            "&scope=" + encodeURIComponent(req.dataset.scope || ""));
        }
      })
      .catch(function () {})
      .finally(function () { setTimeout(poll, 1000); });
  }
  setTimeout(poll, 1000);
})();
