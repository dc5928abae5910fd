// The allocations of the view's window by the line that made them: what
// memory_viz's Allocator State History lists one event a line, counted by
// site (GET {prefix}/allocations?t0=&t1=, server/live/allocations.go).
// Churn, a mask made and freed each chunk, never shows on the memory chart
// (what is alive at once) nor among the largest objects; here it is the
// first row: 2,048 allocations at one line, 2,048 freed (issue 26).
//
// While open it follows the view: each new window asks again, the answer
// for an older one cancelled.

import { bytes, duration, sizeRange } from "./palette.js";
import { el } from "./dom.js";

const CSS = `.lt-allocs{margin-top:.5em;border-top:1px solid #ccc;padding-top:.25em;font:13px system-ui,sans-serif}
.lt-allocs-head{display:flex;align-items:center;justify-content:space-between;gap:.5em}
.lt-allocs-scroll{max-height:24em;overflow:auto}
.lt-allocs table{border-collapse:collapse;margin:.25em 0}
.lt-allocs th,.lt-allocs td{padding:1px 8px;text-align:left;border-bottom:1px solid #ddd;vertical-align:top}
.lt-allocs .num{text-align:right;font-variant-numeric:tabular-nums}
.lt-allocs tr.lt-hl td{background:#fff3c4}`;

let styled = false;
function injectStyle() {
  if (styled) return;
  styled = true;
  document.head.append(el("style", {}, CSS));
}

/** where names a site of the answer as the findings do: the notebook line, else its frame. */
export function where(site, names) {
  if (!site) return "unknown site";
  if (site.cell) return names.line(site.cell, site.line);
  const f = site.frames?.[0];
  return f ? `${f.func} ${(f.file || "").split("/").slice(-2).join("/")}:${f.line}` : site.text || "unknown site";
}

/** churn says of a row whether most of what it made was freed in the window: made again and again. */
export function churn(row) { return row.count >= 8 && row.freed >= row.count / 2; }

export class AllocationsPanel {
  /** view is the TimelineView whose source and window it follows. */
  constructor(view) {
    injectStyle();
    this.view = view;
    this.gen = 0;
    this.title = el("h2", { class: "lt-h", id: `lt-allocs-h-${view.id}` }, "Allocations");
    this.closeBtn = el("button", { type: "button", class: "lt-btn", "data-testid": "allocations-close", onclick: () => this.close() }, "Close");
    this.body = el("div", { class: "lt-allocs-body" });
    this.root = el("section", { class: "lt-allocs", "data-testid": "timeline-allocations", "aria-labelledby": `lt-allocs-h-${view.id}`, hidden: "" },
      el("div", { class: "lt-allocs-head" }, this.title, this.closeBtn), this.body);
  }

  get isOpen() { return !this.root.hidden; }

  /**
   * open shows the allocations of [t0, t1) (the view's window when not
   * given); highlight, {site_id, category}, marks the row a finding
   * named.
   */
  async open(t0, t1, highlight) {
    if (highlight !== undefined) this.highlight = highlight;
    const v = this.view.view;
    t0 ??= v.t0; t1 ??= v.t1;
    const gen = ++this.gen;
    this.abort?.abort();
    const abort = this.abort = new AbortController();
    this.asked = `${t0}:${t1}`; this.askedAt = performance.now(); this.inFlight = true;
    const first = this.root.hidden;
    this.root.hidden = false;
    if (first) this.body.replaceChildren(el("p", { class: "lt-hint", role: "status" }, "Counting…"));
    let a;
    try {
      const r = await fetch(`${this.view.source.prefix}/allocations?t0=${Math.max(0, Math.floor(t0))}&t1=${Math.ceil(t1)}&n=50`, { credentials: "same-origin", signal: abort.signal });
      a = await r.json();
      if (!r.ok) throw new Error(a.message || r.statusText);
    } catch (err) {
      if (gen === this.gen) this.inFlight = false;
      if (err.name === "AbortError") return;
      if (gen === this.gen) this.body.replaceChildren(el("p", { class: "lt-hint", role: "alert" }, `Could not count the allocations: ${err.message}`));
      return;
    }
    if (gen !== this.gen) return;
    this.inFlight = false;
    this.state = a;
    this.render(a);
    if (first) this.root.scrollIntoView?.({ block: "nearest" });
  }

  /**
   * follow asks again for the view's window, if open (the view moved, or
   * a live trace grew): at most one ask at a time and one a second, for
   * each reads the window's events; the last window is always asked for.
   */
  follow() {
    if (!this.isOpen) return;
    const v = this.view.view, key = `${v.t0}:${v.t1}`;
    if (key === this.asked) return;
    clearTimeout(this.followTimer);
    const wait = (this.askedAt || 0) + 1000 - performance.now();
    if (this.inFlight || wait > 0) { this.followTimer = setTimeout(() => this.follow(), Math.max(wait, 100)); return; }
    this.open();
  }

  close() {
    this.gen++; this.abort?.abort(); clearTimeout(this.followTimer);
    this.root.hidden = true; this.state = null; this.highlight = undefined; this.inFlight = false; this.asked = null;
  }

  render(a) {
    const names = this.view.names;
    this.title.textContent = `Allocations from ${duration(a.t0)} to ${duration(a.t1)}: ${a.allocations.toLocaleString("en-US")}, ${bytes(a.bytes)}`;
    const kids = [];
    if (a.partial) {
      const why = a.reason === "scan_limit" ? "the rest of the window is more events than one count reads: zoom in for it" : "the rest of the window is not in the trace's file (yet)";
      kids.push(el("p", { class: "lt-hint", role: "status", "data-testid": "allocations-partial" }, `Counted up to ${duration(a.until)}: ${why}.`));
    }
    if (!a.sites.length) {
      kids.push(el("p", { class: "lt-hint", "data-testid": "allocations-none" }, "No allocations in this window."));
      this.body.replaceChildren(...kids);
      return;
    }
    const hl = this.highlight;
    let marked = null;
    const rows = a.sites.map((s) => {
      const tr = el("tr", { "data-testid": "allocations-row", "data-site": String(s.site_id), "data-category": s.category },
        el("td", {}, where(s.site, names)),
        el("td", {}, s.category),
        el("td", {}, s.label + (s.labels > 1 ? ` and ${s.labels - 1} more label${s.labels > 2 ? "s" : ""}` : "")),
        el("td", { class: "num" }, s.count.toLocaleString("en-US")),
        el("td", { class: "num" }, s.freed.toLocaleString("en-US") + (churn(s) ? " (churn)" : "")),
        el("td", { class: "num" }, sizeRange(0, 0, s.min, s.max)),
        el("td", { class: "num" }, bytes(s.bytes)));
      if (hl && hl.site_id === s.site_id && hl.category === s.category) { tr.classList.add("lt-hl"); marked = tr; }
      return tr;
    });
    const table = el("table", { "data-testid": "allocations-table" },
      el("caption", { class: "lt-hint" }, "By the line that made them, the most first; freed: of those, how many were freed in this window."),
      el("thead", {}, el("tr", {}, ...["Where", "Category", "Label", "Allocations", "Freed", "Sizes", "Bytes"].map((h, i) => el("th", { scope: "col", class: i >= 3 ? "num" : "" }, h)))),
      el("tbody", {}, ...rows));
    kids.push(el("div", { class: "lt-allocs-scroll" }, table));
    if (a.more) kids.push(el("p", { class: "lt-hint" }, `… and ${a.more} more places.`));
    this.body.replaceChildren(...kids);
    marked?.scrollIntoView?.({ block: "nearest" });
  }
}
