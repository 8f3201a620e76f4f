/* memrisk charts: draws every Vega-Lite spec of the page (JSON script elements of class memrisk-chart) with Vega-Embed,
   inlined before this script. A chart whose element names an explorer (data-explorer K) opens the window of a clicked
   point there; on a study page (data-cells, cell name → K) the point's cell names the explorer. A mark whose datum has
   an `anchor` (a books view block) scrolls to that element of the page. The action menu offers PNG and SVG export only
   (the editor link would leave the page). */
(function () {
  "use strict";
  document.querySelectorAll("script.memrisk-chart").forEach((script) => {
    const target = document.getElementById(script.dataset.target);
    const spec = JSON.parse(script.textContent);
    const options = { renderer: "svg", actions: { export: true, source: false, compiled: false, editor: false } };
    vegaEmbed(target, spec, options).then((result) => {
      result.view.addEventListener("click", (event, item) => {
        const anchor = item && item.datum && item.datum.anchor && document.getElementById(item.datum.anchor);
        if (anchor) {
          anchor.scrollIntoView({ block: "center" });
          anchor.classList.add("flash");
          setTimeout(() => anchor.classList.remove("flash"), 1500);
        }
      });
      const cells = script.dataset.cells ? JSON.parse(script.dataset.cells) : null;
      const explorerOf = (datum) => (cells ? cells[datum.cell] : script.dataset.explorer);
      if (cells || script.dataset.explorer !== undefined) {
        result.view.addEventListener("click", (event, item) => {
          const datum = item && item.datum;
          if (datum && datum.id !== undefined && explorerOf(datum) !== undefined && window.memriskOpenWindow) {
            window.memriskOpenWindow(String(explorerOf(datum)), String(datum.id));
          }
        });
      }
      target.dataset.ready = "true";
    }).catch((error) => {
      target.textContent = "This chart could not be drawn: " + error;
      console.error(error);
    });
  });
})();
