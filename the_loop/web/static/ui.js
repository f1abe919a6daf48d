/* the-loop dashboard: draw the graph with the vendored Mermaid, copy commands, and
   refresh the page's main part without a full reload when it changed. No other script,
   nothing fetched from anywhere but this site. */
(function () {
  "use strict";
  var main = document.getElementById("content");
  var status = document.getElementById("updated");

  function draw(root) {
    var nodes = root.querySelectorAll("pre.mermaid:not([data-processed])");
    if (!nodes.length || !window.mermaid) {
      return Promise.resolve();
    }
    return window.mermaid.run({ nodes: nodes }).then(function () {
      nodes.forEach(function (pre) {
        var svg = pre.querySelector("svg");
        if (svg) {
          svg.setAttribute("role", "img");
          svg.setAttribute("aria-label", "Graph of the work item; current node " +
                           (pre.getAttribute("data-current") || ""));
          var current = svg.querySelector("g.node.current");
          if (current) {
            current.setAttribute("data-current", "true");
          }
        }
      });
      document.documentElement.setAttribute("data-graph", "drawn");
    }).catch(function () {
      document.documentElement.setAttribute("data-graph", "failed");
    });
  }

  function copy(event) {
    var button = event.target.closest("button.copy");
    if (!button || !navigator.clipboard) {
      return;
    }
    navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    });
  }

  function refresh() {
    var etag = main.getAttribute("data-etag");
    var headers = { "X-The-Loop-Refresh": "1" };
    if (etag) {
      headers["If-None-Match"] = etag;
    }
    return fetch(window.location.href, { headers: headers, credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.status === 304 || (!response.ok && response.status !== 401)) {
          return;
        }
        if (response.status === 401) {
          window.location.reload();
          return;
        }
        main.setAttribute("data-etag", response.headers.get("ETag") || "");
        return response.text().then(function (html) {
          main.innerHTML = html;
          var count = Number(main.getAttribute("data-refreshes") || "0") + 1;
          main.setAttribute("data-refreshes", String(count));
          if (status) {
            status.textContent = "Updated " + new Date().toLocaleTimeString() + ".";
          }
          return draw(main);
        });
      })
      .catch(function () { /* offline for a moment: the next tick tries again */ });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (window.mermaid) {
      window.mermaid.initialize({ startOnLoad: false, securityLevel: "strict", theme: "default",
                                  flowchart: { htmlLabels: false } });
    }
    draw(document);
    document.addEventListener("click", copy);
    var seconds = Number(main.getAttribute("data-refresh") || "0");
    if (seconds > 0) {
      window.setInterval(refresh, seconds * 1000);
    }
  });
})();
