// Colours. Categories use Paul Tol's "muted" scheme, which stays
// distinguishable under the common colour-vision deficiencies; lingering
// and leaked objects are never told by colour alone: they carry a hatch
// pattern and a badge too.

import { CATEGORIES } from "./wire.gen.js";

export { CATEGORIES };

// The colour of each category by name: the categories and their order
// are timeline/event's (wire.gen.js), the colours are the browser's.
const COLOUR = {
  none: "#DDDDDD",
  weights: "#332288", // indigo
  kv_cache: "#88CCEE", // cyan
  attn_mask: "#44AA99", // teal
  activation: "#117733", // green
  logits: "#999933", // olive
  workspace: "#DDCC77", // sand
  tokenizer_cache: "#CC6677", // rose
  batch_scratch: "#882255", // wine
  other: "#AA4499", // purple
};

/** CATEGORY_COLOURS[c] is the colour of category c. */
export const CATEGORY_COLOURS = CATEGORIES.map((c) => COLOUR[c]);

/**
 * SITE_COLOURS colour a watched service's blocks by site (its heap by
 * site: one category, many sites), by site id: the same "muted" scheme,
 * then its pale grey for the id that wraps round.
 */
export const SITE_COLOURS = ["#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#CC6677", "#882255", "#AA4499", "#DDDDDD"];

export const TRACKS = [
  { key: "allocated", label: "allocated", colour: "#000000", dash: [] },
  { key: "reserved", label: "reserved", colour: "#0077BB", dash: [6, 3] },
  { key: "device_used", label: "device used", colour: "#EE7733", dash: [2, 2] },
  { key: "go_heap", label: "Go heap", colour: "#666666", dash: [8, 2, 2, 2] },
];

// Lingering objects: Okabe–Ito vermillion with dark diagonal hatching;
// leaks (never freed) add a cross-hatch and an "∞" badge at their end.
export const LINGERING = "#D55E00";
export const SCOPE_COLOURS = { cell: "#BBBBBB", request: "#CCDDAA", batch: "#EEDDAA", step: "#DDEEFF" };

const patterns = new Map();

/** hatch returns a canvas pattern of diagonal (or crossed) dark lines. */
export function hatch(ctx, cross) {
  const key = cross ? "x" : "/";
  if (patterns.has(key)) return patterns.get(key);
  const c = document.createElement("canvas");
  c.width = c.height = 8;
  const g = c.getContext("2d");
  g.strokeStyle = "rgba(0,0,0,0.55)";
  g.lineWidth = 1.5;
  g.beginPath();
  g.moveTo(0, 8); g.lineTo(8, 0);
  if (cross) { g.moveTo(0, 0); g.lineTo(8, 8); }
  g.stroke();
  const p = ctx.createPattern(c, "repeat");
  patterns.set(key, p);
  return p;
}

export function bytes(n) {
  if (!isFinite(n)) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  const digits = (v, i) => (i && Math.abs(v) < 10 ? 1 : 0);
  let i = 0;
  // The unit is the printed figure's: 1023.7 B prints as 1.0 KiB, and
  // 1048575 B (1023.999 KiB) as 1.0 MiB, never "1024".
  while (i < u.length - 1 && Math.abs(+n.toFixed(digits(n, i))) >= 1024) { n /= 1024; i++; }
  return `${n.toFixed(digits(n, i))} ${u[i]}`;
}

// sizes is an object's bytes as the code asked for them first, and the
// allocator's block beside them when the two read differently (a request
// rounded up to 512 B, or handed a whole cached block): "600 B (1.0 KiB
// allocated)". Without a requested figure, the block's.
export function sizes(requested, size) {
  if (!requested) return bytes(size);
  const r = bytes(requested), s = bytes(size);
  return r === s ? r : `${r} (${s} allocated)`;
}

// sizeRange is sizes() for a range of sizes ("2.1–4.1 KiB (2.5–4.5 KiB
// allocated)"), one figure when both ends read the same.
export function sizeRange(rmin, rmax, amin, amax) {
  const span = (x, y) => (bytes(x) === bytes(y) ? bytes(x) : `${bytes(x)}–${bytes(y)}`);
  if (!rmax) return span(amin, amax);
  const r = span(rmin, rmax), a = span(amin, amax);
  return r === a ? r : `${r} (${a} allocated)`;
}

// rate is a growth per unit, requested first and the allocator's blocks
// beside: "+28 KiB/step (+36 KiB allocated)".
export function rate(requested, size, unit) {
  const s = `+${bytes(size)}`;
  if (!requested) return `${s}/${unit}`;
  const r = `+${bytes(requested)}`;
  return r === s ? `${r}/${unit}` : `${r}/${unit} (${s} allocated)`;
}

export function duration(ns) {
  const a = Math.abs(ns);
  if (a < 1e3) return `${ns.toFixed(0)} ns`;
  if (a < 1e6) return `${(ns / 1e3).toFixed(a < 1e4 ? 1 : 0)} µs`;
  if (a < 1e9) return `${(ns / 1e6).toFixed(a < 1e7 ? 1 : 0)} ms`;
  return `${(ns / 1e9).toFixed(a < 1e10 ? 2 : 1)} s`;
}

/** perSecond is a rate, short: 950, 12.3 k, 4.1 M. */
export function perSecond(r) {
  if (r < 1000) return r < 10 ? r.toFixed(1) : String(Math.round(r));
  if (r < 1e6) return `${(r / 1e3).toFixed(r < 1e4 ? 1 : 0)} k`;
  return `${(r / 1e6).toFixed(r < 1e7 ? 1 : 0)} M`;
}
