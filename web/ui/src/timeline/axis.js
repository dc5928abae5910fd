// The time axis, piecewise linear: stretches of the trace with no events
// (idle time, a notebook left open for minutes between cells) longer than
// a threshold are collapsed into breaks, each a band of BREAK_PX pixels
// whatever the zoom, so that the time where events are fills the view.
// Everywhere else one nanosecond is the same number of pixels.
//
// A view is still given by the real times at its edges, [t0, t1]: an
// Axis maps time ↔ x for that view, width W and these breaks. The mapping
// goes through a global pixel coordinate P(t) = k·active(t) + BREAK_PX·
// breaks(t), where active(t) is the time before t outside breaks and
// breaks(t) the number of breaks before t (a fraction inside one); k, the
// pixels per nanosecond, is what makes [t0, t1] exactly W wide. Zoom and
// pan are then moves of P, so they work across breaks.

import { axisTicks } from "./layout.js";

/** BREAK_PX is a break's width on screen (CSS px). */
export const BREAK_PX = 28;

// A view whose breaks would leave the active time less than this share of
// its width (zoomed into an idle stretch) is drawn linearly instead.
const MIN_ACTIVE = 0.25;

export class Axis {
  /** breaks: sorted, disjoint [{t0, t1}] (ns); those outside [t0, t1] are ignored. */
  constructor(t0, t1, W, breaks = []) {
    this.t0 = t0; this.t1 = t1; this.W = W;
    this.breaks = breaks;
    let k = this.scale(breaks);
    if (!(k > 0) || !isFinite(k) || this.activePx(breaks, k) < W * MIN_ACTIVE) { this.breaks = []; k = this.scale([]); }
    this.k = k;
    this.p0 = this.P(t0);
  }

  /** scale is the k that makes [t0, t1] W pixels wide with these breaks (NaN when the breaks alone are wider). */
  scale(breaks) {
    this.breaks = breaks;
    const da = this.active(this.t1) - this.active(this.t0), db = this.count(this.t1) - this.count(this.t0);
    const rest = this.W - BREAK_PX * db;
    return da > 0 && rest > 0 ? rest / da : NaN;
  }

  activePx(breaks, k) { this.breaks = breaks; return k * (this.active(this.t1) - this.active(this.t0)); }

  /** active is the time before t outside breaks. */
  active(t) {
    let a = t;
    for (const b of this.breaks) {
      if (t <= b.t0) break;
      a -= Math.min(t, b.t1) - b.t0;
    }
    return a;
  }

  /** count is the number of breaks before t, a fraction inside one. */
  count(t) {
    let n = 0;
    for (const b of this.breaks) {
      if (t <= b.t0) break;
      n += t >= b.t1 ? 1 : (t - b.t0) / (b.t1 - b.t0);
    }
    return n;
  }

  P(t) { return this.k * this.active(t) + BREAK_PX * this.count(t); }

  /** invP is the time at global pixel p. */
  invP(p) {
    let t = 0, px = 0; // the start of the current piece: its time and P
    for (const b of this.breaks) {
      const a = px + this.k * (b.t0 - t); // P at the break's start
      if (p < a) return t + (p - px) / this.k;
      if (p < a + BREAK_PX) return b.t0 + ((p - a) / BREAK_PX) * (b.t1 - b.t0);
      t = b.t1; px = a + BREAK_PX;
    }
    return t + (p - px) / this.k;
  }

  x(t) { return this.P(t) - this.p0; }
  t(x) { return this.invP(this.p0 + x); }

  /** shifted is the view [t0, t1] panned by dx pixels. */
  shifted(dx) { return [this.t(dx), this.t(this.W + dx)]; }

  /** zoomed is the view scaled by f (f < 1 zooms in) about pixel at, which keeps its time. */
  zoomed(f, at) {
    const c = this.t(at);
    const z = Object.create(Axis.prototype);
    Object.assign(z, { breaks: this.breaks, k: this.k / f, W: this.W });
    const p = z.P(c) - at;
    return [z.invP(p), z.invP(p + this.W)];
  }

  /** visible is the breaks in view with their pixel bounds: [{t0, t1, x0, x1}]. */
  visible() {
    const out = [];
    for (const b of this.breaks) {
      if (b.t1 <= this.t0 || b.t0 >= this.t1) continue;
      out.push({ t0: b.t0, t1: b.t1, x0: this.x(b.t0), x1: this.x(b.t1) });
    }
    return out;
  }

  /** segments is the view's stretches between breaks: [{t0, t1, x0, x1}], what to ask data for. */
  segments() {
    const out = [];
    let t = this.t0;
    for (const b of this.breaks) {
      if (b.t1 <= t) continue;
      if (b.t0 >= this.t1) break;
      if (b.t0 > t) out.push({ t0: t, t1: b.t0, x0: this.x(t), x1: this.x(b.t0) });
      t = b.t1;
    }
    if (t < this.t1) out.push({ t0: t, t1: this.t1, x0: this.x(t), x1: this.W });
    return out;
  }

  /** ticks are the axis's ticks [{t, x, label}]: each stretch between breaks has its own. */
  ticks(measure, gap = 12) {
    const out = [];
    for (const s of this.segments()) {
      const w = s.x1 - s.x0;
      if (w < 30) continue;
      for (const k of axisTicks(s.t0, s.t1, w, measure, gap)) out.push({ ...k, x: this.x(k.t) });
    }
    return out;
  }
}

/**
 * idleSpans finds where a trace's events are, from buckets ({t0, t1,
 * events}) over it: the first and last busy buckets' bounds and the gaps
 * between busy buckets longer than minGap ns and than frac of the busy
 * span. null without events.
 */
export function idleSpans(buckets, { minGap = 1e9, frac = 0.05 } = {}) {
  const busy = buckets.filter((b) => b.events > 0);
  if (!busy.length) return null;
  const first = busy[0].t0, last = busy[busy.length - 1].t1;
  const gaps = [];
  for (let i = 1; i < busy.length; i++) {
    const a = busy[i - 1].t1, b = busy[i].t0;
    if (b - a > minGap && b - a > frac * (last - first)) gaps.push({ t0: a, t1: b, before: busy[i - 1], after: busy[i] });
  }
  return { first, last, gaps, firstBucket: busy[0], lastBucket: busy[busy.length - 1] };
}

/**
 * findIdle asks lod (async (t0, t1, px) => buckets) over [0, end] and
 * narrows the edges of what it finds with finer queries of the buckets at
 * them: {first, last, breaks: [{t0, t1}]}, or null without events.
 */
export async function findIdle(lod, end, opts = {}) {
  const px = opts.px || 2048;
  const coarse = idleSpans(await lod(0, end, px), opts);
  if (!coarse) return null;
  // The busy time inside a bucket at an edge: its first or last busy sub-bucket.
  const narrow = async (b, side) => {
    if (b.t1 - b.t0 <= 1000) return side === "first" ? b.t0 : b.t1;
    const fine = idleSpans(await lod(b.t0, b.t1, 1024), { minGap: Infinity });
    if (!fine) return side === "first" ? b.t0 : b.t1;
    return side === "first" ? Math.max(b.t0, fine.first) : Math.min(b.t1, fine.last);
  };
  const [first, last] = await Promise.all([narrow(coarse.firstBucket, "first"), narrow(coarse.lastBucket, "last")]);
  const breaks = [];
  for (const g of coarse.gaps) {
    const [a, b] = await Promise.all([narrow(g.before, "last"), narrow(g.after, "first")]);
    // A margin either side, so that the events at a break's edges are not on it.
    const pad = Math.min((b - a) * 0.01, 5e6);
    if (b - a - 2 * pad > 0) breaks.push({ t0: a + pad, t1: b - pad });
  }
  return { first, last, breaks };
}

/** idleLabel says a break's length: "— 4 min 38 s idle —". */
export function idleLabel(ns) {
  const s = ns / 1e9;
  let text;
  if (s < 60) text = `${s.toFixed(s < 10 ? 1 : 0)} s`;
  else if (s < 3600) text = `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  else text = `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `— ${text} idle —`;
}
