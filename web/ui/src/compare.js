// Entry of the compare view: draws the two traces of a
// [data-testid=compare-charts] section (each container's data-trace-url
// is its routes' prefix, {base}api/timeline/traces/{name}) as linked
// timeline views: A beside B (stacked on a narrow screen), one memory
// scale, their time axes related as the axes control says (linked.js),
// kept in the address as ?axes=.
import { TraceSource } from "./timeline/source.js";
import { LinkedView, link, setMode } from "./compare/linked.js";

const charts = document.querySelector('[data-testid="compare-charts"]');
const views = {};
if (charts) {
  for (const root of charts.querySelectorAll("[data-trace-url]")) {
    views[root.dataset.side] = new LinkedView(root, new TraceSource(root.dataset.traceUrl));
    // Each view's panels (Allocator, Allocations) are named after their
    // chart too, so that A's and B's are told apart ("A leaky.ltrace
    // Allocator").
    const h = root.closest("section")?.querySelector("h2");
    if (h) {
      h.id ||= `compare-chart-${root.dataset.side}-h`;
      for (const p of root.querySelectorAll("section[aria-labelledby]")) p.setAttribute("aria-labelledby", `${h.id} ${p.getAttribute("aria-labelledby")}`);
    }
  }
  const axes = charts.querySelector('[data-testid="compare-axes"]');
  const hint = charts.querySelector('[data-testid="compare-axes-hint"]');
  const group = link(Object.values(views), axes?.value);
  axes?.addEventListener("change", () => {
    setMode(group, axes.value);
    if (hint) hint.textContent = axes.selectedOptions[0]?.dataset.hint || "";
    const u = new URL(location.href);
    u.searchParams.set("axes", axes.value);
    history.replaceState(history.state, "", u);
  });
}

// For tests and the browser console: window.linger.compare.a and .b.
window.linger = Object.assign(window.linger || {}, { compare: views });
