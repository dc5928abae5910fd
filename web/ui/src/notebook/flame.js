// A wall-clock profile's flame graph, drawn interactively by
// d3-flame-graph: click a frame to zoom to it, hover for its time; the
// graph is one tab stop, whose arrow keys move between frames (up to the
// caller, down to the largest callee, left and right to neighbours),
// Enter zooms to the frame and Escape back out, and a live line says
// the frame.

import flamegraph from "d3-flame-graph";
import { select } from "d3-selection";
import { toHierarchy, describe, kindColor, navigate, seconds } from "./flamedata.js";

// d3-flame-graph's own stylesheet is left out of the bundle (build.mjs):
// these rules are the ones it needs, on the graph's own light background
// so that it reads the same in the dark theme.
const CSS = `
.flame { background: #fcfcfa; color: #111; border: 1px solid #c8c8c8; border-radius: 3px; padding: 4px 6px; margin: 4px 0; }
.flame:focus-visible { outline: 2px solid #2a6fdb; outline-offset: 1px; }
.flame-head { font: 12px system-ui, sans-serif; display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
.flame-head button { font: inherit; }
.flame-detail { font: 12px ui-monospace, Menlo, Consolas, monospace; min-height: 1.5em; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.flame .d3-flame-graph rect { stroke: #fcfcfa; stroke-width: 0.5; }
.flame .d3-flame-graph rect:hover, .flame .d3-flame-graph .current rect { stroke: #111; stroke-width: 1.5; cursor: pointer; }
.flame .d3-flame-graph .fade { opacity: 0.55; }
.flame .d3-flame-graph-label { white-space: nowrap; text-overflow: ellipsis; overflow: hidden; font: 11px/17px ui-monospace, Menlo, Consolas, monospace; margin: 0 3px; color: #111; }
`;

function addStyle() {
  if (document.getElementById("flame-style")) return;
  const s = document.createElement("style");
  s.id = "flame-style";
  s.textContent = CSS;
  document.head.append(s);
}

/** Builds the element of a flame tree (the kernel's FLAME_MIME data), or null. */
export function renderFlame(data) {
  const tree = toHierarchy(data, 0.0005);
  if (!tree) return null;
  addStyle();
  const total = tree.value;
  const wrap = document.createElement("div");
  wrap.className = "output flame";
  wrap.dataset.testid = "output-flame";
  wrap.tabIndex = 0;
  wrap.setAttribute("role", "group");
  wrap.setAttribute("aria-roledescription", "flame graph");
  wrap.setAttribute("aria-label", `Wall-clock flame graph of ${tree.full}: arrow keys move between frames, Enter zooms, Escape zooms out`);
  const head = document.createElement("div");
  head.className = "flame-head";
  const title = document.createElement("strong");
  title.textContent = `Wall-clock profile of ${tree.full}`;
  const facts = document.createElement("span");
  const off = data.off_cpu_ns || 0;
  facts.textContent = `${seconds(data.wall_ns || 0)} wall, ${data.samples || 0} samples; the cell's goroutines ${seconds(total)}, ${total ? Math.round((100 * off) / total) : 0}% waiting (blue)`;
  const reset = document.createElement("button");
  reset.type = "button";
  reset.textContent = "Reset zoom";
  reset.dataset.testid = "flame-reset";
  head.append(title, facts, reset);
  const detail = document.createElement("div");
  detail.className = "flame-detail";
  detail.dataset.testid = "flame-detail";
  detail.setAttribute("aria-live", "polite");
  const chartEl = document.createElement("div");
  wrap.append(head, detail, chartEl);

  const reduced = typeof matchMedia === "function" && matchMedia("(prefers-reduced-motion: reduce)").matches;
  const chart = flamegraph()
    .inverted(true)
    .cellHeight(18)
    .minFrameSize(1)
    .transitionDuration(reduced ? 0 : 300)
    .selfValue(false)
    .setColorMapper((d) => (d.highlight ? "#e600e6" : kindColor(d.data.kind, d.data.full)))
    .label((d) => describe(d.data, total))
    .setDetailsElement(detail)
    .setDetailsHandler((text) => {
      detail.textContent = text || (current ? describe(current.data, total) : "");
    });
  let current = null;
  const mark = () => {
    select(chartEl).selectAll("g.frame").classed("current", (d) => d === current);
    detail.textContent = current ? describe(current.data, total) : "";
  };
  chart.onClick((d) => {
    current = d;
    mark();
  });
  let drawn = false;
  const draw = (width) => {
    if (width <= 0) return;
    chart.width(Math.floor(width));
    if (!drawn) {
      select(chartEl).datum(tree).call(chart);
      drawn = true;
    } else {
      chart.update();
    }
    mark();
  };
  // The graph is drawn once the output is in the page and has a width,
  // and again when that width changes.
  if (typeof ResizeObserver !== "undefined") {
    new ResizeObserver(() => draw(chartEl.clientWidth)).observe(chartEl);
  } else {
    requestAnimationFrame(() => draw(chartEl.clientWidth || 960));
  }
  reset.addEventListener("click", () => {
    if (!drawn) return;
    chart.resetZoom();
    current = select(chartEl).datum();
    mark();
  });
  wrap.addEventListener("keydown", (e) => {
    if (!drawn || e.target !== wrap || e.altKey || e.ctrlKey || e.metaKey) return;
    const root = select(chartEl).datum();
    if (e.key === "Enter" || e.key === " ") {
      chart.zoomTo(current || root);
    } else if (e.key === "Escape") {
      chart.resetZoom();
      current = root;
    } else {
      const next = navigate(current || root, e.key);
      if (!next) return;
      current = next;
    }
    e.preventDefault();
    e.stopPropagation(); // the notebook's command keys (arrows move cells) stay out
    mark();
  });
  return wrap;
}
