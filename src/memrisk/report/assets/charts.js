/* memrisk charts: draws every Vega-Lite spec of the page (JSON script elements of class memrisk-chart) with Vega-Embed,
   inlined before this script. A chart whose element names an explorer (data-explorer K) opens the window of a clicked
   point there. The action menu offers PNG and SVG export only (the editor link would leave the page). */
(function () {
  "use strict";
  document.querySelectorAll("script.memrisk-chart").forEach((script) => {
    const target = document.getElementById(script.dataset.target);
    const spec = JSON.parse(script.textContent);
    const options = { renderer: "svg", actions: { export: true, source: false, compiled: false, editor: false } };
    vegaEmbed(target, spec, options).then((result) => {
      const key = script.dataset.explorer;
      if (key !== undefined) {
        result.view.addEventListener("click", (event, item) => {
          if (item && item.datum && item.datum.id !== undefined && window.memriskOpenWindow) {
            window.memriskOpenWindow(key, item.datum.id);
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
