// The allocator at one instant, as memory_viz's "Allocator State
// History" draws it: each segment the caching allocator reserved from the
// device is a bar, its width proportional to its size; the blocks alive
// in it are coloured by category and the free space between them is left
// light and hatched, so that fragmentation (reserved memory too broken up
// for a large request) is something one sees. The figures come from the
// server (GET {prefix}/segments?at=|time=, package export's Allocator);
// the bars are drawn on one canvas, never one DOM node per block.
//
// The panel is a drawer over the lower part of the view, as Perfetto's
// details panel is: opened from an OOM mark, the chart and its mark stay
// in sight above it. Its time slider is the chart's axis (one step a
// pixel, idle breaks collapsed alike), the chart's cursor drawn where it
// is; its order control sorts the segments (by category by default).

import { CATEGORIES, CATEGORY_COLOURS, bytes, duration } from "./palette.js";
import { el } from "./dom.js";

const ROW = 18; // px per segment
const MAX_ROWS = 400; // segments drawn; the rest are counted
const LABEL_W = 88; // px for a segment's size at the left of its bar
const SLIDE_MS = 150; // the slider asks the server once it rests this long
// The drawer's share of its scroller's visible height: the chart's top
// rows (the axis, scopes and OOM marks) keep the rest.
const DRAWER_SHARE = 0.5;

/**
 * ORDERS are the segments' orders, the first the default, each with the
 * sentence the panel shows for it. By address is the order the device
 * handed them out, so a model's weights, loaded first, would always lead.
 */
export const ORDERS = [
  { value: "category", label: "category", hint: "Grouped by the category holding most of each segment, the category holding most memory first, the largest segment first within it; empty segments last." },
  { value: "size", label: "size", hint: "The largest segment first." },
  { value: "free", label: "free space", hint: "The most free space first: where a request could still go, and the crumbs that fragment it." },
  { value: "address", label: "address", hint: "By address, the order the device handed them out: the oldest first (a model's weights, loaded first, lead)." },
];

/**
 * instantText is the slider's time t (ns) to as many decimals as one of
 * its steps (per ns) can tell apart: "1.153 s" over a whole run,
 * "1.462920 s" zoomed onto an OOM. Exported for the unit test.
 */
export function instantText(t, per) {
  const a = Math.abs(t), [unit, name] = a >= 1e9 ? [1e9, "s"] : a >= 1e6 ? [1e6, "ms"] : a >= 1e3 ? [1e3, "µs"] : [1, "ns"];
  const digits = per > 0 ? Math.min(6, Math.max(0, Math.ceil(Math.log10(unit / per)))) : 2;
  return `${(t / unit).toFixed(unit === 1 ? 0 : digits)} ${name}`;
}

/**
 * orderSegments returns the segments in an order of ORDERS; byCategory
 * (the state's by_category, biggest first) ranks the categories.
 * Exported for the unit test.
 */
export function orderSegments(segments, order, byCategory = []) {
  const rank = new Map(byCategory.map((c, i) => [c.category, i]));
  const group = (g) => (g.category ? rank.get(g.category) ?? rank.size : rank.size + 1);
  const bySize = (a, b) => b.size - a.size || a.address - b.address;
  const cmp = {
    category: (a, b) => group(a) - group(b) || bySize(a, b),
    size: bySize,
    free: (a, b) => (b.size - b.allocated) - (a.size - a.allocated) || bySize(a, b),
    address: (a, b) => a.address - b.address,
  }[order] ?? bySize;
  return segments.slice().sort(cmp);
}

/** colourOf is a category's colour by name. */
function colourOf(name) {
  const i = CATEGORIES.indexOf(name);
  return i > 0 ? CATEGORY_COLOURS[i] : "#BBBBBB";
}

/**
 * summarize turns the server's state into the sentences and figures the
 * panel shows: exported for the unit test.
 */
export function summarize(s) {
  const frag = s.free_in_segments > 0 ? 1 - s.largest_free / s.free_in_segments : 0;
  return {
    reserved: `reserved ${bytes(s.reserved)} in ${s.segments.length} segment${s.segments.length === 1 ? "" : "s"}`,
    allocated: `allocated ${bytes(s.allocated)} (asked for ${bytes(s.requested)})`,
    free: `free inside segments ${bytes(s.free_in_segments)}, largest free run ${bytes(s.largest_free)}`,
    // The share of the free space a single request cannot use: 0 when it
    // is one run, near 1 when it is crumbs.
    fragmentation: frag,
    fragText: s.free_in_segments > 0 ? `fragmentation ${(frag * 100).toFixed(0)}%` : "no free space inside segments",
  };
}

// A drawer: sticky at the bottom of whatever scrolls the view (the
// notebook's dock, the trace page), over the findings, never over the
// chart's top rows; at its own place once scrolled to.
const CSS = `.lt-segments{position:sticky;bottom:0;z-index:5;display:flex;flex-direction:column;min-height:10em;margin-top:.5em;border-top:2px solid #555;padding:.25em .25em 0;background:var(--panel,#fff);box-shadow:0 -3px 8px rgba(0,0,0,.18);font:13px system-ui,sans-serif}
.lt-segments[hidden]{display:none}
.lt-seg-head{display:flex;align-items:center;justify-content:space-between;gap:.5em}
.lt-seg-head .lt-h{margin:.2em 0}
.lt-seg-controls{display:flex;flex-wrap:wrap;align-items:center;gap:.25em .6em;margin:.1em 0 .2em}
.lt-seg-controls input[type=range]{flex:1 1 10em;min-width:8em}
.lt-seg-controls output{min-width:5.5em;font-variant-numeric:tabular-nums}
.lt-seg-order-hint{margin:0 0 .2em;color:#444;font-size:12px}
.lt-seg-body{flex:1 1 auto;min-height:0;overflow:auto}
.lt-seg-canvas{display:block}
.lt-seg-swatch{display:inline-block;width:.8em;height:.8em;border:1px solid #555;vertical-align:middle}
.lt-seg-oom{display:flex;flex-wrap:wrap;align-items:flex-start;gap:0 1.5em;border-left:4px solid #000;padding:.25em .5em;margin:.25em 0;background:#f6f6f6}
.lt-seg-oom p{flex:1 1 18em;margin:.2em 0}
.lt-seg-table{border-collapse:collapse;margin:.25em 0}
.lt-seg-table caption{text-align:left;font-weight:600}
.lt-seg-table th,.lt-seg-table td{padding:1px 8px;text-align:left;border-bottom:1px solid #ddd}
.lt-seg-table .num{text-align:right;font-variant-numeric:tabular-nums}
.lt-seg-info{min-height:1.3em;margin:.25em 0}`;

let styled = false;
function injectStyle() {
  if (styled) return;
  styled = true;
  document.head.append(el("style", {}, CSS));
}

export class SegmentsPanel {
  /** view is the TimelineView whose source and canvas it follows. */
  constructor(view) {
    injectStyle();
    this.view = view;
    this.gen = 0;
    this.order = ORDERS[0].value;
    const id = view.id;
    this.title = el("h2", { class: "lt-h", id: `lt-seg-h-${id}` }, "Allocator");
    this.closeBtn = el("button", { type: "button", class: "lt-btn", "data-testid": "segments-close", onclick: () => this.close(true) }, "Close");
    // The slider is the chart's axis: 0 to its width in pixels.
    this.slider = el("input", {
      type: "range", id: `lt-seg-time-${id}`, min: "0", max: "1000", step: "1", value: "0", "data-testid": "segments-time",
      "aria-describedby": `lt-seg-time-hint-${id}`,
    });
    this.slider.addEventListener("input", () => this.slid());
    this.timeOut = el("output", { for: `lt-seg-time-${id}`, "data-testid": "segments-time-value" });
    this.orderSel = el("select", { id: `lt-seg-order-${id}`, "data-testid": "segments-order", "aria-describedby": `lt-seg-order-hint-${id}` },
      ...ORDERS.map((o) => el("option", { value: o.value }, o.label)));
    this.orderSel.addEventListener("change", () => this.setOrder(this.orderSel.value));
    this.orderHint = el("p", { class: "lt-seg-order-hint", id: `lt-seg-order-hint-${id}`, "data-testid": "segments-order-hint" }, ORDERS[0].hint);
    const controls = el("div", { class: "lt-seg-controls" },
      el("label", { for: `lt-seg-time-${id}` }, "Time"), this.slider, this.timeOut,
      el("span", { id: `lt-seg-time-hint-${id}`, class: "lt-sr" }, "The chart's time axis, a pixel a step; the chart's cursor follows."),
      el("label", { for: `lt-seg-order-${id}` }, "Order by"), this.orderSel);
    this.body = el("div", { class: "lt-seg-body" });
    this.root = el("section", { class: "lt-segments", "data-testid": "timeline-segments", "aria-labelledby": `lt-seg-h-${id}`, hidden: "" },
      el("div", { class: "lt-seg-head" }, this.title, this.closeBtn), controls, this.orderHint, this.body);
    this.root.addEventListener("keydown", (ev) => { if (ev.key === "Escape") { ev.preventDefault(); this.close(true); } });
  }

  get isOpen() { return !this.root.hidden; }

  /**
   * open shows the allocator at an instant: {at: "peak"|"end"|seq} or
   * {time: ns}; why says how it was asked for ("at the OOM"). The chart's
   * top rows are brought into sight above the drawer: the panel never
   * scrolls the chart away.
   */
  async open(instant, why = "") {
    const first = this.root.hidden;
    clearTimeout(this.slideTimer);
    this.root.hidden = false;
    shown.add(this);
    watchPlacement();
    this.place();
    if (first || !this.state) this.body.replaceChildren(el("p", { class: "lt-hint", role: "status" }, "Loading…"));
    if (instant.time !== undefined) this.setTime(instant.time);
    if (await this.load(instant, why)) this.keepChartInView();
  }

  /** load asks for the allocator at an instant and shows it; answers whether it did (a newer ask wins). */
  async load(instant, why = "") {
    const gen = ++this.gen;
    this.abort?.abort();
    const abort = this.abort = new AbortController();
    const q = instant.time !== undefined ? `time=${Math.round(instant.time)}` : `at=${encodeURIComponent(instant.at)}`;
    this.root.setAttribute("aria-busy", "true");
    let s;
    try {
      const r = await fetch(`${this.view.source.prefix}/segments?${q}`, { credentials: "same-origin", signal: abort.signal });
      s = await r.json();
      if (!r.ok) throw new Error(s.message || r.statusText);
    } catch (err) {
      if (gen === this.gen && err.name !== "AbortError") {
        this.root.removeAttribute("aria-busy");
        this.body.replaceChildren(el("p", { class: "lt-hint", role: "alert" }, `Could not read the allocator: ${err.message}`));
      }
      return false;
    }
    if (gen !== this.gen) return false;
    this.root.removeAttribute("aria-busy");
    this.state = s;
    // A slider's time stays where it was put; an instant by seq takes the event's.
    if (instant.time === undefined) this.setTime(s.time_ns);
    this.render(s, why);
    return true;
  }

  /** close hides the panel and its cursor; focus goes back to the chart when it was inside. */
  close(byUser) {
    this.gen++;
    this.abort?.abort();
    clearTimeout(this.slideTimer);
    const had = this.root.contains(document.activeElement);
    this.root.hidden = true;
    shown.delete(this);
    this.state = null;
    this.time = undefined;
    this.view.schedule();
    if (byUser && had) this.view.canvas.focus({ preventScroll: true });
  }

  /** setTime puts the panel's instant, the slider and the chart's cursor at t. */
  setTime(t) {
    this.time = t;
    this.view.cursorT = t;
    const v = this.view, text = instantText(t, v.W ? Math.abs(v.t(1) - v.t(0)) : 0);
    this.timeOut.textContent = text;
    this.slider.setAttribute("aria-valuetext", text);
    this.syncSlider();
    this.view.schedule();
  }

  /** syncSlider sets the slider's range to the chart's width and its thumb to the instant's x. */
  syncSlider() {
    const v = this.view, w = Math.max(1, Math.round(v.W || 1));
    if (+this.slider.max !== w) this.slider.max = String(w);
    if (this.time === undefined) return;
    // Within a pixel it stays where the person put it: an axis with idle
    // breaks maps a pixel to a time and back to its neighbour, which set
    // here took each arrow key's step back.
    const x = Math.round(Math.min(w, Math.max(0, v.x(this.time))));
    if (Math.abs(+this.slider.value - x) > 1) this.slider.value = String(x);
  }

  /** slid: the slider moved; the cursor follows at once, the allocator once it rests. */
  slid() {
    const v = this.view, x = +this.slider.value;
    // An OOM mark within the pixel is the failed allocation itself.
    const oom = v.marks?.find((m) => m.oom && Math.abs(v.x(m.time) - x) < 1);
    const t = oom ? oom.time : Math.max(0, v.t(x));
    // An answer still on its way (the instant the panel opened at) is
    // stale now: it must not take the instant back from the slider.
    this.gen++;
    this.abort?.abort();
    this.setTime(t);
    clearTimeout(this.slideTimer);
    this.slideTimer = setTimeout(() => this.load({ time: t }, oom ? "at the OOM" : ""), SLIDE_MS);
  }

  setOrder(order) {
    this.order = order;
    this.orderSel.value = order;
    this.orderHint.textContent = (ORDERS.find((o) => o.value === order) ?? ORDERS[0]).hint;
    if (this.state) this.render(this.state, this.why);
  }

  /**
   * drawInstant draws the panel's instant on the chart, the cursor the
   * slider moves (TimelineView.draw calls it last); it keeps the slider
   * on the chart's axis as the chart pans and zooms.
   */
  drawInstant(ctx) {
    if (this.root.hidden || this.time === undefined) return;
    const v = this.view;
    this.syncSlider();
    const x = v.x(this.time);
    if (!(x >= 0 && x <= v.W)) return;
    const px = Math.round(x) + 0.5, top = v.tracks.scopes;
    ctx.save();
    ctx.lineWidth = 1;
    ctx.strokeStyle = "rgba(255,255,255,0.85)";
    ctx.beginPath(); ctx.moveTo(px + 1, top); ctx.lineTo(px + 1, v.H); ctx.stroke();
    ctx.strokeStyle = "#111";
    ctx.setLineDash([5, 3]);
    ctx.beginPath(); ctx.moveTo(px, top); ctx.lineTo(px, v.H); ctx.stroke();
    ctx.restore();
  }

  /**
   * place sizes the drawer to a share of what its scroller shows, and
   * lifts it by the part of the scroller below the window (the notebook's
   * dock reaches below it until the page scrolls).
   */
  place() {
    if (this.root.hidden) return;
    const sc = scroller(this.root);
    const r = sc ? sc.getBoundingClientRect() : { top: 0, bottom: innerHeight };
    const below = Math.max(0, r.bottom - innerHeight);
    const seen = Math.min(innerHeight, r.bottom) - Math.max(0, r.top);
    this.root.style.bottom = `${below}px`;
    this.root.style.maxHeight = `${Math.max(160, Math.round(seen * DRAWER_SHARE))}px`;
  }

  /**
   * keepChartInView scrolls the view's scroller, when it must, so that
   * the chart's top rows (the axis, scopes and marks) are in sight above
   * the drawer: as when an OOM finding far below the chart opened it.
   */
  keepChartInView() {
    const v = this.view, sc = scroller(this.root) ?? document.scrollingElement;
    if (!sc) return;
    const doc = sc === document.scrollingElement;
    const top = doc ? 0 : Math.max(0, sc.getBoundingClientRect().top);
    const chart = v.canvas.getBoundingClientRect().top, rows = v.tracks?.mem ?? 60;
    const panelTop = this.root.getBoundingClientRect().top;
    if (chart >= top && chart + rows <= panelTop) return;
    const to = v.toolbar?.getBoundingClientRect().top ?? chart;
    sc.scrollBy({ top: to - top, behavior: "instant" });
    this.place();
  }

  render(s, why) {
    this.why = why;
    const sum = summarize(s);
    const at = s.oom ? "at the OOM" : why;
    this.title.textContent = `Allocator at ${duration(s.time_ns)}${s.peak ? " (the peak)" : ""}${at ? ` ${at}` : ""}`;
    const kids = [];
    if (s.oom) {
      const live = el("table", { class: "lt-seg-table", "data-testid": "segments-oom-live" },
        el("caption", {}, "Alive when it failed"),
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Category"), el("th", { scope: "col", class: "num" }, "Bytes"))),
        el("tbody", {}, ...(s.oom.live || []).map((c) => el("tr", {}, el("td", {}, c.category), el("td", { class: "num" }, bytes(c.bytes))))));
      kids.push(el("div", { class: "lt-seg-oom", "data-testid": "segments-oom" },
        el("p", {}, el("b", {}, "Out of memory: "), `asked for ${bytes(s.oom.size)} (${s.oom.category}${s.oom.label ? `, ${s.oom.label}` : ""}); the device had ${bytes(s.oom.device_free)} free under its memory limit, the largest free run in a segment was ${bytes(s.largest_free)}.`),
        (s.oom.live || []).length ? live : null));
    }
    kids.push(el("p", { class: "lt-seg-sum", "data-testid": "segments-summary" },
      `${sum.reserved}; ${sum.allocated}; ${sum.free}; ${sum.fragText}.` + (s.outside ? ` ${bytes(s.outside)} alive outside the allocator's segments.` : "")));
    if (s.by_category?.length) {
      kids.push(el("p", { class: "lt-seg-cats", "data-testid": "segments-categories" },
        ...s.by_category.flatMap((c, i) => [i ? " · " : "", el("i", { class: "lt-seg-swatch", style: `background:${colourOf(c.category)}` }), ` ${c.category} ${bytes(c.bytes)} (${c.blocks})`])));
    }
    if (!s.segments.length) {
      kids.push(el("p", { class: "lt-hint" }, "No segments reserved at this instant."));
      this.body.replaceChildren(...kids);
      return;
    }
    this.ordered = orderSegments(s.segments, this.order, s.by_category);
    const rows = Math.min(s.segments.length, MAX_ROWS);
    this.canvas = el("canvas", {
      class: "lt-seg-canvas", "data-testid": "segments-canvas", role: "img", tabindex: "0",
      "aria-label": `${rows} segments as bars by ${this.orderSel.selectedOptions[0]?.textContent ?? this.order}, blocks coloured by category, free space hatched. ${sum.reserved}; ${sum.free}; ${sum.fragText}.`,
    });
    this.info = el("p", { class: "lt-seg-info", "aria-live": "polite", "data-testid": "segments-info" }, "Point at a block for what it is.");
    kids.push(el("div", { class: "lt-seg-scroll" }, this.canvas), this.info);
    if (s.segments.length > rows || s.truncated) kids.push(el("p", { class: "lt-hint" }, `${s.segments.length > rows ? `The first ${rows} of ${s.segments.length} segments in this order are drawn. ` : ""}${s.truncated ? "Past 20,000 blocks, segments are drawn without theirs." : ""}`));
    this.body.replaceChildren(...kids);
    this.canvas.addEventListener("pointermove", (ev) => this.point(ev));
    requestAnimationFrame(() => this.draw());
  }

  draw() {
    const s = this.state, c = this.canvas, segs = this.ordered;
    if (!s || !c?.isConnected || !segs) return;
    const rows = Math.min(segs.length, MAX_ROWS);
    const w = Math.max(240, this.body.clientWidth - 4), h = rows * ROW + 4;
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    c.style.width = `${w}px`; c.style.height = `${h}px`;
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const largest = Math.max(...segs.slice(0, rows).map((g) => g.size));
    const barW = w - LABEL_W - 4;
    this.layout = [];
    ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
    const hatchFree = freeHatch(ctx);
    for (let i = 0; i < rows; i++) {
      const g = segs[i], y = 2 + i * ROW, gw = Math.max(2, (g.size / largest) * barW);
      // The category holding most of it, a tick at the left; a rule
      // between the groups of the category order.
      if (g.category) { ctx.fillStyle = colourOf(g.category); ctx.fillRect(0, y + 2, 4, ROW - 5); }
      if (this.order === "category" && i && g.category !== segs[i - 1].category) { ctx.fillStyle = "#777"; ctx.fillRect(0, y - 0.5, w, 1); }
      ctx.fillStyle = "#222";
      ctx.fillText(`${bytes(g.size)}${g.pool === "small" ? " s" : ""}`, 7, y + ROW / 2, LABEL_W - 11);
      const x0 = LABEL_W;
      let x = x0;
      const row = { y, x0, w: gw, g, blocks: [] };
      for (const b of g.blocks || []) {
        const bw = (b.size / g.size) * gw;
        if (b.free) { ctx.fillStyle = "#F4F4F4"; ctx.fillRect(x, y + 2, bw, ROW - 5); ctx.fillStyle = hatchFree; ctx.fillRect(x, y + 2, bw, ROW - 5); }
        else { ctx.fillStyle = colourOf(b.category); ctx.fillRect(x, y + 2, Math.max(bw, 0.5), ROW - 5); }
        row.blocks.push({ x, w: bw, b });
        x += bw;
      }
      ctx.strokeStyle = "#555"; ctx.lineWidth = 1;
      ctx.strokeRect(x0 + 0.5, y + 1.5, gw - 1, ROW - 4);
      this.layout.push(row);
    }
  }

  point(ev) {
    const r = this.canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    const row = this.layout?.find((l) => y >= l.y && y < l.y + ROW);
    const blk = row?.blocks.find((k) => x >= k.x && x < k.x + Math.max(k.w, 1));
    if (!row) return;
    const g = row.g;
    const where = `segment of ${bytes(g.size)} at 0x${g.address.toString(16)} (${g.pool} pool, ${bytes(g.allocated)} allocated${g.category ? `, mostly ${g.category}` : ""})`;
    if (!blk) { this.info.textContent = where; return; }
    const b = blk.b;
    this.info.textContent = b.free ? `free: ${bytes(b.size)} in a ${where}` :
      `${b.label || "(no label)"}: ${bytes(b.size)}${b.requested && b.requested !== b.size ? ` (asked for ${bytes(b.requested)})` : ""}, ${b.category}${b.site ? `, at ${b.site.split(" ← ")[0]}` : ""}; in a ${where}`;
  }
}

// The open panels, placed again when the window or their scroller moves.
const shown = new Set();
let watching = false, placing = 0;
function watchPlacement() {
  if (watching) return;
  watching = true;
  const place = () => {
    placing ||= requestAnimationFrame(() => { placing = 0; for (const p of shown) p.place(); });
  };
  addEventListener("resize", place);
  addEventListener("scroll", place, { passive: true, capture: true });
}

/** scroller is the nearest ancestor that scrolls (what a sticky drawer sticks to), null for the page itself. */
function scroller(e) {
  for (let p = e.parentElement; p && p !== document.body && p !== document.documentElement; p = p.parentElement) {
    const o = getComputedStyle(p).overflowY;
    if (o === "auto" || o === "scroll" || o === "hidden") return p;
  }
  return null;
}

function freeHatch(ctx) {
  const c = document.createElement("canvas");
  c.width = c.height = 6;
  const g = c.getContext("2d");
  g.strokeStyle = "rgba(0,0,0,0.25)";
  g.beginPath(); g.moveTo(0, 6); g.lineTo(6, 0); g.stroke();
  return ctx.createPattern(c, "repeat");
}
