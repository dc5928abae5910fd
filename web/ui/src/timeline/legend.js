// What the chart shows, chosen by the person looking: the legend's
// category keys are buttons that hide or show a category (weights first,
// as the categories' order has them), the weights folded out of the
// chart (on by default) or not, a log-scale toggle, a baseline (the
// chart then shows the growth since an instant), and the Go heap lane
// collapsed or expanded. The choices but the baseline are kept per page
// (localStorage, by path), so that a reload or the next run keeps them.

import { CATEGORIES, CATEGORY_COLOURS, TRACKS, bytes, duration } from "./palette.js";
import { el } from "./dom.js";

const KEY = () => `linger.timeline:${location.pathname}`;

/** loadPrefs is the page's kept choices: {hidden: [category names], log, hostCollapsed, eventAxis, foldWeights}. */
export function loadPrefs() {
  try { return JSON.parse(localStorage.getItem(KEY())) || {}; } catch { return {}; }
}

function savePrefs(view) {
  const p = { hidden: [...view.hidden].map((c) => CATEGORIES[c]), log: view.logScale, hostCollapsed: view.hostCollapsed, eventAxis: view.eventAxis, foldWeights: view.foldWeights };
  try { localStorage.setItem(KEY(), JSON.stringify(p)); } catch { /* private mode: kept for this page only */ }
}

/** applyPrefs sets the view's display state from the page's kept choices. */
export function applyPrefs(view) {
  const p = loadPrefs();
  view.hidden = new Set((p.hidden || []).map((n) => CATEGORIES.indexOf(n)).filter((c) => c > 0));
  view.logScale = !!p.log;
  view.hostCollapsed = !!p.hostCollapsed;
  view.eventAxis = !!p.eventAxis;
  // Weights, loaded once, are most of a model's memory: a 228 MiB leak
  // beside 2.9 GiB of them was a one-pixel band. Folded out by default.
  view.foldWeights = p.foldWeights !== false;
  view.baseline = null;
}

/** setHostCollapsed collapses or expands the Go heap lane, as its toggle does. */
function setHostCollapsed(view, collapsed) {
  view.hostCollapsed = collapsed;
  view.hostToggle?.setAttribute("aria-expanded", String(!collapsed));
  savePrefs(view);
  view.resize();
}

/** expandHost shows the Go heap lane whole, if collapsed (a finding about the Go heap leads there). */
export function expandHost(view) {
  if (view.hostCollapsed) setHostCollapsed(view, false);
}

/** buildLegend fills view.legend: category buttons, then the tracks' and lingering keys. */
export function buildLegend(view) {
  const legend = view.legend;
  view.legendButtons = [];
  legend.append(el("span", { class: "lt-legend-hint" }, "Show:"));
  for (let c = 1; c < CATEGORIES.length; c++) {
    const b = el("button", {
      type: "button", class: "lt-key lt-cat", "data-testid": `legend-${CATEGORIES[c]}`, "data-category": CATEGORIES[c],
      "aria-pressed": String(!view.hidden.has(c)), title: `Show or hide ${CATEGORIES[c]} in the chart and the objects`,
    }, el("i", { style: `background:${CATEGORY_COLOURS[c]}` }), CATEGORIES[c]);
    b.addEventListener("click", () => {
      if (view.hidden.has(c)) view.hidden.delete(c); else view.hidden.add(c);
      b.setAttribute("aria-pressed", String(!view.hidden.has(c)));
      savePrefs(view);
      view.displayChanged();
    });
    view.legendButtons.push(b);
    legend.append(b);
  }
  for (const t of TRACKS) legend.append(el("span", { class: "lt-key" }, el("i", { class: "lt-line", style: `border-color:${t.colour};border-style:${t.dash.length ? "dashed" : "solid"}` }), t.label));
  legend.append(el("span", { class: "lt-key", "data-testid": "legend-lingering" }, el("i", { class: "lt-linger" }), "▲ lingering, freed late"),
    el("span", { class: "lt-key", "data-testid": "legend-leak" }, el("i", { class: "lt-leak" }), "∞ leak, never freed"));
}

/** displayControls are the toolbar's buttons for the scale, the baseline and the Go heap lane. */
export function displayControls(view) {
  const log = el("button", { type: "button", class: "lt-btn lt-toggle", "data-testid": "timeline-log", "aria-pressed": String(view.logScale), title: "Logarithmic memory scale: small objects under large ones show" }, "Log scale");
  log.addEventListener("click", () => {
    view.logScale = !view.logScale;
    log.setAttribute("aria-pressed", String(view.logScale));
    savePrefs(view);
    view.displayChanged();
  });
  const fold = el("button", { type: "button", class: "lt-btn lt-toggle", "data-testid": "timeline-fold-weights", "aria-pressed": String(view.foldWeights), title: "Fold the weights out of the memory chart: it then shows what is above them, what changes (the objects lane still has them)" }, "Fold weights");
  fold.addEventListener("click", () => {
    view.foldWeights = !view.foldWeights;
    fold.setAttribute("aria-pressed", String(view.foldWeights));
    savePrefs(view);
    view.displayChanged();
  });
  const host = el("button", { type: "button", class: "lt-btn", "data-testid": "timeline-host-toggle", "aria-expanded": String(!view.hostCollapsed), title: "Collapse or expand the Go heap lane" }, "Go heap lane");
  host.addEventListener("click", () => setHostCollapsed(view, !view.hostCollapsed));
  view.hostToggle = host;
  const events = el("button", { type: "button", class: "lt-btn lt-toggle", "data-testid": "timeline-event-axis", "aria-pressed": String(view.eventAxis), title: "Event-indexed time axis, as memory_viz: every event the same room, idle time none" }, "Event axis");
  events.addEventListener("click", () => {
    view.eventAxis = !view.eventAxis;
    events.setAttribute("aria-pressed", String(view.eventAxis));
    savePrefs(view);
    view.breakKey = null;
    view.setAxis();
    view.refresh();
  });
  const set = el("button", { type: "button", class: "lt-btn", "data-testid": "timeline-baseline-set", title: "Subtract what was alive at the cursor (the last place pointed at on the chart, else the middle of the view; b on the chart): the chart shows the growth since then" }, "Baseline: set at cursor");
  set.addEventListener("click", () => view.setBaseline(view.cursorTime()));
  const clear = el("button", { type: "button", class: "lt-btn", "data-testid": "timeline-baseline-clear", disabled: "", title: "Show absolute memory again" }, "Clear baseline");
  clear.addEventListener("click", () => view.setBaseline(null));
  const label = el("span", { class: "lt-baseline", "data-testid": "timeline-baseline" });
  view.baselineUI = { clear, label };
  // The compare view's linked axes are in time, shared by both traces.
  return [...(view.collapsesIdle ? [events] : []), fold, log, set, clear, label, host];
}

/** showBaseline updates the baseline's label and Clear button. */
export function showBaseline(view) {
  const { clear, label } = view.baselineUI;
  const b = view.baseline;
  if (b) clear.removeAttribute("disabled"); else clear.setAttribute("disabled", "");
  label.textContent = b ? `Growth since ${duration(b.t)} (baseline ${bytes(b.total)})` : "";
}

/** baselineAt is the state at time t from lod buckets of [0, t]: their last one's values at its end. */
export function baselineAt(buckets, t) {
  const b = buckets[buckets.length - 1];
  if (!b) return null;
  const v = b.last || b.max;
  const category = v.category.slice();
  let total = 0;
  for (let c = 1; c < category.length; c++) total += category[c];
  return { t, category, allocated: v.allocated, reserved: v.reserved, device_used: v.device_used, total };
}
