// Entry of the compare view: draws the two traces of a
// [data-testid=compare-charts] section (each container's data-trace-url
// is its routes' prefix, {base}api/timeline/traces/{name}) as linked
// timeline views: A above B, one time axis, one memory scale.
import { TraceSource } from "./timeline/source.js";
import { LinkedView, link } from "./compare/linked.js";

const charts = document.querySelector('[data-testid="compare-charts"]');
const views = {};
if (charts) {
  for (const root of charts.querySelectorAll("[data-trace-url]")) {
    views[root.dataset.side] = new LinkedView(root, new TraceSource(root.dataset.traceUrl));
  }
  link(Object.values(views));
}

// For tests and the browser console: window.linger.compare.a and .b.
window.linger = Object.assign(window.linger || {}, { compare: views });
