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

// busy says whether a bucket has memory events: an allocation or a free,
// or more than a few events (a cell that moves host memory alone: its
// scope's bounds and Go heap samples). A counter sample now and then (an
// idle kernel's Go heap, before issue 26 one every 0.8 s for as long as
// a page stayed open) or a scope's begin or end alone does not make idle
// time busy.
const busyBucket = (b) => (b.allocs || 0) + (b.frees || 0) > 0 || b.events >= 4;

/**
 * idleSpans finds where a trace's events are, from buckets ({t0, t1,
 * events, allocs, frees}) over it: the first and last busy buckets'
 * bounds and the gaps between busy buckets longer than minGap ns and than
 * frac of the busy span. A trace without a busy bucket counts every
 * event. null without events.
 */
export function idleSpans(buckets, { minGap = 1e9, frac = 0.05 } = {}) {
  let busy = buckets.filter(busyBucket);
  if (!busy.length) busy = buckets.filter((b) => b.events > 0);
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

/**
 * EventAxis is memory_viz's axis: x follows the events' index, not time,
 * so that every event has the same room however long the idle time
 * between them. The index of time t is counted from lod buckets over the
 * whole trace (overview: [{t0, t1, events}]), the events of a bucket
 * spread evenly over it, plus a little time (IDLE_SHARE of the events
 * over the trace's length) so that the mapping is strictly increasing:
 * exact at the buckets' bounds, as fine as the overview's buckets inside
 * them. Same interface as Axis; no breaks (idle time has no events).
 */
const IDLE_SHARE = 0.01;

export class EventAxis {
  constructor(t0, t1, W, overview) {
    this.t0 = t0; this.t1 = t1; this.W = W;
    this.breaks = [];
    this.eventIndexed = true;
    const n = overview.length;
    this.bounds = new Float64Array(n + 1);
    this.cum = new Float64Array(n + 1);
    for (let i = 0; i < n; i++) {
      this.bounds[i] = overview[i].t0;
      this.cum[i + 1] = this.cum[i] + (overview[i].events || 0);
    }
    this.bounds[n] = n ? overview[n - 1].t1 : 1;
    this.total = this.cum[n];
    this.slope = (IDLE_SHARE * Math.max(this.total, 1)) / Math.max(this.bounds[n] - this.bounds[0], 1);
    this.e0 = this.E(t0);
    this.k = W / Math.max(this.E(t1) - this.e0, 1e-9);
  }

  /** count is the number of events before t (fractional inside a bucket). */
  count(t) {
    const b = this.bounds, n = b.length - 1;
    if (n <= 0 || t <= b[0]) return 0;
    if (t >= b[n]) return this.total;
    let lo = 0, hi = n; // b[lo] <= t < b[hi]
    while (hi - lo > 1) { const m = (lo + hi) >> 1; if (b[m] <= t) lo = m; else hi = m; }
    return this.cum[lo] + ((t - b[lo]) / (b[lo + 1] - b[lo])) * (this.cum[lo + 1] - this.cum[lo]);
  }

  E(t) { return this.count(t) + this.slope * t; }

  /** invE is the time of index e (bisection: E is increasing). */
  invE(e) {
    let lo = Math.min(0, this.t0), hi = Math.max(this.bounds[this.bounds.length - 1], this.t1, 1);
    while (this.E(hi) < e) hi *= 2;
    for (let i = 0; i < 100 && hi - lo > 1e-3; i++) { const m = (lo + hi) / 2; if (this.E(m) < e) lo = m; else hi = m; }
    return (lo + hi) / 2;
  }

  x(t) { return (this.E(t) - this.e0) * this.k; }
  t(x) { return this.invE(this.e0 + x / this.k); }
  shifted(dx) { return [this.t(dx), this.t(this.W + dx)]; }
  zoomed(f, at) {
    const e = this.e0 + at / this.k, k = this.k / f, e0 = e - at / k;
    return [this.invE(e0), this.invE(e0 + this.W / k)];
  }
  visible() { return []; }

  /** segments are slices of equal width, so that busy times get buckets in proportion to their room. */
  segments() {
    const out = [], n = 8;
    for (let i = 0; i < n; i++) {
      const x0 = (i * this.W) / n, x1 = ((i + 1) * this.W) / n;
      const t0 = i ? out[i - 1].t1 : this.t0, t1 = i === n - 1 ? this.t1 : this.t(x1);
      if (t1 > t0) out.push({ t0, t1, x0, x1 });
      else out.push({ t0, t1: t0, x0, x1 });
    }
    return out.filter((s) => s.t1 > s.t0);
  }

  /** ticks are at round event indices, labelled "#N". */
  ticks(measure, gap = 12) {
    const a = this.e0, b = this.e0 + this.W / this.k;
    const out = [];
    for (let p = 10 ** Math.floor(Math.log10(Math.max((b - a) / 50, 1))); ; p *= 10) {
      for (const m of [1, 2, 5]) {
        const step = m * p, first = Math.ceil(a / step), last = Math.floor(b / step);
        if (last - first > 50) continue;
        const label = (i) => `#${Math.round(i * step).toLocaleString("en")}`;
        if ((step * this.k) < Math.max(measure(label(first)), measure(label(last))) + gap && last > first) continue;
        for (let i = first; i <= last; i++) { const t = this.invE(i * step); out.push({ t, x: this.x(t), label: label(i) }); }
        return out;
      }
    }
  }
}
