// The allocator at one instant, as memory_viz's "Allocator State
// History" draws it: each segment the caching allocator reserved from the
// device is a bar, its width proportional to its size; the blocks alive
// in it are coloured by category and the free space between them is left
// light and hatched, so that fragmentation (reserved memory too broken up
// for a large request) is something one sees. The figures come from the
// server (GET {prefix}/segments?at=|time=, package export's Allocator);
// the bars are drawn on one canvas, never one DOM node per block.

import { CATEGORIES, CATEGORY_COLOURS, bytes, duration } from "./palette.js";
import { el } from "./dom.js";

const ROW = 18; // px per segment
const MAX_ROWS = 400; // segments drawn; the rest are counted
const LABEL_W = 88; // px for a segment's size at the left of its bar

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

const CSS = `.lt-segments{margin-top:.5em;border-top:1px solid #ccc;padding-top:.25em;font:13px system-ui,sans-serif}
.lt-seg-head{display:flex;align-items:center;justify-content:space-between;gap:.5em}
.lt-seg-scroll{max-height:24em;overflow:auto}
.lt-seg-canvas{display:block}
.lt-seg-swatch{display:inline-block;width:.8em;height:.8em;border:1px solid #555;vertical-align:middle}
.lt-seg-oom{border-left:4px solid #000;padding:.25em .5em;margin:.25em 0;background:#f6f6f6}
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
    this.title = el("h2", { class: "lt-h", id: `lt-seg-h-${view.id}` }, "Allocator");
    this.closeBtn = el("button", { type: "button", class: "lt-btn", "data-testid": "segments-close", onclick: () => this.close() }, "Close");
    this.body = el("div", { class: "lt-seg-body" });
    this.root = el("section", { class: "lt-segments", "data-testid": "timeline-segments", "aria-labelledby": `lt-seg-h-${view.id}`, hidden: "" },
      el("div", { class: "lt-seg-head" }, this.title, this.closeBtn), this.body);
  }

  /**
   * open shows the allocator at an instant: {at: "peak"|"end"|seq} or
   * {time: ns}; why says how it was asked for ("at the OOM").
   */
  async open(instant, why = "") {
    const gen = ++this.gen;
    this.root.hidden = false;
    this.title.textContent = "Allocator";
    this.body.replaceChildren(el("p", { class: "lt-hint", role: "status" }, "Loading…"));
    const q = instant.time !== undefined ? `time=${Math.round(instant.time)}` : `at=${encodeURIComponent(instant.at)}`;
    let s;
    try {
      const r = await fetch(`${this.view.source.prefix}/segments?${q}`, { credentials: "same-origin" });
      s = await r.json();
      if (!r.ok) throw new Error(s.message || r.statusText);
    } catch (err) {
      if (gen === this.gen) this.body.replaceChildren(el("p", { class: "lt-hint", role: "alert" }, `Could not read the allocator: ${err.message}`));
      return;
    }
    if (gen !== this.gen) return;
    this.state = s;
    this.render(s, why);
    this.root.scrollIntoView?.({ block: "nearest" });
  }

  close() { this.gen++; this.root.hidden = true; this.state = null; }

  render(s, why) {
    const sum = summarize(s);
    this.title.textContent = `Allocator at ${duration(s.time_ns)}${s.peak ? " (the peak)" : ""}${why ? ` ${why}` : ""}`;
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
    const rows = Math.min(s.segments.length, MAX_ROWS);
    this.canvas = el("canvas", {
      class: "lt-seg-canvas", "data-testid": "segments-canvas", role: "img", tabindex: "0",
      "aria-label": `${rows} segments as bars, blocks coloured by category, free space hatched. ${sum.reserved}; ${sum.free}; ${sum.fragText}.`,
    });
    this.info = el("p", { class: "lt-seg-info", "aria-live": "polite", "data-testid": "segments-info" }, "Point at a block for what it is.");
    const scroller = el("div", { class: "lt-seg-scroll" }, this.canvas);
    kids.push(scroller, this.info);
    if (s.segments.length > rows || s.truncated) kids.push(el("p", { class: "lt-hint" }, `${s.segments.length > rows ? `The first ${rows} of ${s.segments.length} segments are drawn. ` : ""}${s.truncated ? "Past 20,000 blocks, segments are drawn without theirs." : ""}`));
    this.body.replaceChildren(...kids);
    this.canvas.addEventListener("pointermove", (ev) => this.point(ev));
    requestAnimationFrame(() => this.draw());
  }

  draw() {
    const s = this.state, c = this.canvas;
    if (!s || !c?.isConnected) return;
    const rows = Math.min(s.segments.length, MAX_ROWS);
    const w = Math.max(240, this.body.clientWidth - 4), h = rows * ROW + 4;
    const dpr = window.devicePixelRatio || 1;
    c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
    c.style.width = `${w}px`; c.style.height = `${h}px`;
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const largest = Math.max(...s.segments.slice(0, rows).map((g) => g.size));
    const barW = w - LABEL_W - 4;
    this.layout = [];
    ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
    const hatchFree = freeHatch(ctx);
    for (let i = 0; i < rows; i++) {
      const g = s.segments[i], y = 2 + i * ROW, gw = Math.max(2, (g.size / largest) * barW);
      ctx.fillStyle = "#222";
      ctx.fillText(`${bytes(g.size)}${g.pool === "small" ? " s" : ""}`, 2, y + ROW / 2, LABEL_W - 6);
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
    const where = `segment of ${bytes(g.size)} at 0x${g.address.toString(16)} (${g.pool} pool, ${bytes(g.allocated)} allocated)`;
    if (!blk) { this.info.textContent = where; return; }
    const b = blk.b;
    this.info.textContent = b.free ? `free: ${bytes(b.size)} in a ${where}` :
      `${b.label || "(no label)"}: ${bytes(b.size)}${b.requested && b.requested !== b.size ? ` (asked for ${bytes(b.requested)})` : ""}, ${b.category}${b.site ? `, at ${b.site.split(" ← ")[0]}` : ""}; in a ${where}`;
  }
}

function freeHatch(ctx) {
  const c = document.createElement("canvas");
  c.width = c.height = 6;
  const g = c.getContext("2d");
  g.strokeStyle = "rgba(0,0,0,0.25)";
  g.beginPath(); g.moveTo(0, 6); g.lineTo(6, 0); g.stroke();
  return ctx.createPattern(c, "repeat");
}
