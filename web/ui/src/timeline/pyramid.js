// A level-of-detail pyramid of memory values over time, built in the
// browser from the live stream: the same model as the server's
// timeline/lod (see docs/timeline.md), so that a kernel's timeline draws
// from memory without a round trip and stays bounded however long the
// kernel runs. Level 0 has buckets of `width` ns; level l is 4^l wider.
// Past maxBuckets level-0 buckets the finest level is dropped. Unlike the
// server's index, events update level 0 only; see up.
//
// Live events arrive in order (add, addColumns). A catch-up summary
// (addSummary) stands in for a range of events the stream skipped; when
// the stream sends that range's events afterwards (backfill, addPast), they
// replace the summary: each level-0 bucket inside the range is rebuilt
// from them, and the bucket where the range began gets back what it held
// before. The bucket where the range ends keeps the summary's maxima
// (events after the range share it), so its maximum may be too high by
// what the summary placed there; its counts and last values are exact.

import { KIND, CATEGORY, NUM_CATEGORIES, POOL, COUNTER, SCOPE } from "./wire.gen.js";

// Values: live bytes of each category, then timeline/memstate's tracks in
// its order, as timeline/lod indexes them.
export const V_ALLOCATED = NUM_CATEGORIES, V_RESERVED = V_ALLOCATED + 1, V_DEVICE = V_ALLOCATED + 2, V_GOHEAP = V_ALLOCATED + 3, NUM_VALUES = V_ALLOCATED + 4;

// The least move of the Go heap inside a cell that makes the cell active
// for a view that follows (Pyramid.hostMoved).
const HOST_STEP = 1 << 20;

// Each bucket: Float64Array of max[NUM_VALUES], last[NUM_VALUES], events, allocs, frees.
const B_LAST = NUM_VALUES, B_EVENTS = 2 * NUM_VALUES, B_ALLOCS = B_EVENTS + 1, B_FREES = B_EVENTS + 2, B_SIZE = B_FREES + 1;

export class Pyramid {
  constructor({ width = 1000, maxBuckets = 1 << 12 } = {}) {
    let n = 1, levels = 1;
    while (n < maxBuckets) { n *= 4; levels++; }
    this.maxBuckets = n;
    this.width = width;
    this.levels = Array.from({ length: levels }, () => []);
    this.cur = new Float64Array(NUM_VALUES);
    this.mem = memState(this.cur);
    this.counters = new Map(); // string id → value index
    this.lastTime = 0;
    this.lastSeq = 0;
    this.events = 0;
    this.gaps = []; // summarised ranges whose events are owed, oldest first (addSummary)
    this.dirtyFrom = Infinity; // level-0 buckets backfill changed since up
    this.dirtyTo = -1;
    // Where the activity is, for a view that follows it: the time of the
    // last memory event (an allocation, a free, a segment, an OOM, a
    // mark; not a counter's sample nor a scope's bounds, which an idle
    // kernel may still make), and the start of the cell scope it came in
    // (-1: none seen).
    this.activeEnd = 0;
    this.activeCell = -1;
    this.cellBegin = -1; // the latest cell scope's start
    this.cellOpen = false; // a cell scope has begun and not ended
    this.cellHeap = -1; // the Go heap's first sample in it (-1: none yet)
  }

  // hostMoved reports, for a counter sample (label, value), whether it is
  // the Go heap inside a cell, moved by HOST_STEP or more since the cell's
  // first sample: a cell that moves host memory alone is activity; the
  // samples every cell makes at its ends, or an idle kernel's, are not.
  hostMoved(label, v) {
    if (!this.cellOpen || this.counters.get(label) !== V_GOHEAP) return false;
    if (this.cellHeap < 0) { this.cellHeap = v; return false; }
    return Math.abs(v - this.cellHeap) >= HOST_STEP;
  }

  // active notes an event of kind k at t (cell: whether a scope's begin or
  // end is a cell's; label and v: a counter's name and value).
  active(k, t, cell, label, v) {
    if (k === KIND.scopeBegin) { if (cell) { this.cellBegin = t; this.cellOpen = true; this.cellHeap = -1; } }
    else if (k === KIND.scopeEnd) { if (cell) this.cellOpen = false; }
    else if (k !== KIND.counter || this.hostMoved(label, v)) { this.activeEnd = t; this.activeCell = this.cellBegin; }
  }

  /** Tells the pyramid a string definition (it follows two counters). */
  defineString(id, s) {
    if (s === COUNTER.deviceUsed) this.counters.set(id, V_DEVICE);
    else if (s === COUNTER.goHeap) this.counters.set(id, V_GOHEAP);
    else this.counters.delete(id);
  }

  /** Adds one event, in the stream's array form (docs/timeline.md). */
  add(e) {
    // Indexing, not destructuring: this runs for every event.
    const seq = e[0], time = e[1], kind = e[2], cat = e[3], size = e[6], label = e[10], extra = e[11];
    const t = Math.max(time, this.lastTime);
    this.lastTime = t; this.lastSeq = seq; this.events++;
    this.extend(t);
    this.count(B_EVENTS);
    const l = this.levels[0], b = l[l.length - 1];
    if (kind === KIND.alloc) { b[B_ALLOCS]++; memAlloc(this.cur, b, true, cat, size); }
    else if (kind === KIND.free) { b[B_FREES]++; memFree(this.cur, b, true, cat, size); }
    else memDevice(this.mem, this.counters, b, true, kind, size, label, extra);
    this.active(kind, t, e[4] === SCOPE.cell, label, size);
  }

  /**
   * Adds live events in the stream's column form (streamcodec.js:
   * decodeFrame), rows from..to-1. The hot path: a million events a second.
   */
  addColumns(c, from = 0, to = c.n) {
    const { time, kind, category, size, label, extra, expect } = c;
    const L = this.levels, mem = this.mem, cur = mem.cur, counters = this.counters;
    let lastTime = this.lastTime, end = L[0].length * this.width;
    let b = L[0][L[0].length - 1];
    // The last memory event's time, noted in the pyramid once a cell
    // begins or the rows end (active's rule, out of the hot path).
    let actT = -1;
    for (let i = from; i < to; i++) {
      let t = time[i];
      if (t < lastTime) t = lastTime;
      lastTime = t;
      if (t >= end) {
        this.lastTime = t;
        this.extend(t);
        end = L[0].length * this.width;
        b = L[0][L[0].length - 1];
      }
      b[B_EVENTS]++;
      const k = kind[i];
      if (k === KIND.alloc) { b[B_ALLOCS]++; memAlloc(cur, b, true, category[i], size[i]); actT = t; }
      else if (k === KIND.free) { b[B_FREES]++; memFree(cur, b, true, category[i], size[i]); actT = t; }
      else {
        memDevice(mem, counters, b, true, k, size[i], label[i], extra[i]);
        if (k === KIND.scopeBegin || k === KIND.scopeEnd) {
          if (expect !== undefined && expect[i] === SCOPE.cell) {
            if (actT >= 0) { this.activeEnd = actT; this.activeCell = this.cellBegin; actT = -1; }
            if (k === KIND.scopeBegin) { this.cellBegin = t; this.cellOpen = true; this.cellHeap = -1; } else this.cellOpen = false;
          }
        } else if (k !== KIND.counter || this.hostMoved(label[i], size[i])) actT = t;
      }
    }
    if (actT >= 0) { this.activeEnd = actT; this.activeCell = this.cellBegin; }
    this.lastTime = lastTime;
    if (to > from) { this.lastSeq = c.first + to - 1; this.events += to - from; }
  }

  /**
   * Adds a catch-up summary (server buckets for events the stream skipped,
   * msg.from..msg.to): each bucket's maxima and last values at its start,
   * as if its events had happened there. With msg.backfill the range's
   * events follow (addPast) and will replace it.
   */
  addSummary(msg) {
    const g = {
      from: msg.from, to: msg.to, next: msg.from,
      // tPre: the last event before the range (-1: none).
      tPre: this.levels[0].length ? this.lastTime : -1, tLast: Math.max(this.lastTime, msg.t1 - 1), t: this.lastTime,
      mem: copyMem(this.mem),
      k: -1, w: this.width, snap: null, counts: [], ci: 0,
    };
    const L0 = this.levels[0];
    if (L0.length) g.snap = { w: this.width, k: L0.length - 1, b: Float64Array.from(L0[L0.length - 1]) };
    if (msg.backfill) this.gaps.push(g); // now: the summary may coarsen the pyramid
    const mx = new Float64Array(NUM_VALUES), last = new Float64Array(NUM_VALUES);
    for (const b of msg.buckets) {
      const t = Math.max(b.t0, this.lastTime);
      this.lastTime = t;
      this.extend(t);
      flatInto(mx, b.max); flatInto(last, b.last);
      for (let v = 0; v < NUM_VALUES; v++) this.set(v, mx[v]);
      for (let v = 0; v < NUM_VALUES; v++) this.set(v, last[v]);
      this.count(B_EVENTS, b.events); this.count(B_ALLOCS, b.allocs); this.count(B_FREES, b.frees);
      // Its cell unknown here: the view asks for the scopes.
      if (b.allocs + b.frees > 0) this.activeEnd = Math.max(this.activeEnd, Math.min(b.t1, g.tLast));
      g.counts.push({ t, events: b.events, allocs: b.allocs, frees: b.frees, wiped: false });
    }
    // The range's last event is at t1-1: the pyramid reaches it, so that
    // its events have buckets to go to.
    if (g.tLast > this.lastTime) { this.lastTime = g.tLast; this.extend(g.tLast); }
    summarised(this.mem);
    this.lastSeq = msg.to;
  }

  /** The ranges still owed, [[from, to], ...], oldest first. */
  owed() { return this.gaps.map((g) => [g.next, g.to]); }

  /**
   * Adds the events of summarised ranges (backfill), in the column form,
   * oldest first. It answers false, taking nothing, if they are not the
   * events owed next.
   */
  addPast(c) {
    let seq = c.first;
    for (let i = 0, q = 0; i < c.n; q++) {
      const g = this.gaps[q];
      if (!g || g.next !== seq) return false;
      const m = Math.min(c.n - i, g.to - g.next + 1);
      i += m; seq += m;
    }
    for (let i = 0; i < c.n;) {
      const g = this.gaps[0], m = Math.min(c.n - i, g.to - g.next + 1);
      this.past(g, c, i, i + m);
      g.next += m; i += m;
      this.events += m;
      if (g.next > g.to) { this.finish(g); this.gaps.shift(); }
    }
    return true;
  }

  // past replays rows i0..i1-1 of c, events of gap g, from the state the
  // range began with, into the level-0 buckets they fall in.
  past(g, c, i0, i1) {
    const { time, kind, category, size, label, extra } = c;
    const w = this.width, L0 = this.levels[0];
    if (g.w !== w) { g.k = g.k < 0 ? -1 : Math.floor(g.t / w); g.w = w; }
    let k = g.k, b = L0[k], lastOK = k >= 0 && (k + 1) * w <= g.tLast;
    for (let i = i0; i < i1; i++) {
      const t = Math.min(Math.max(time[i], g.t), g.tLast);
      g.t = t;
      const kk = Math.floor(t / w);
      if (kk !== k) {
        this.enter(g, k, kk);
        k = kk; b = L0[k];
        lastOK = (k + 1) * w <= g.tLast;
      }
      b[B_EVENTS]++;
      const kd = kind[i];
      if (kd === KIND.alloc) { b[B_ALLOCS]++; memAlloc(g.mem.cur, b, lastOK, category[i], size[i]); }
      else if (kd === KIND.free) { b[B_FREES]++; memFree(g.mem.cur, b, lastOK, category[i], size[i]); }
      else memDevice(g.mem, this.counters, b, lastOK, kd, size[i], label[i], extra[i]);
    }
    if (k >= 0) this.dirty(g.k < 0 ? k : g.k, k);
    g.k = k;
  }

  // enter moves gap g's replay from level-0 bucket kFrom (-1: none yet) to
  // kTo. Buckets holding only the range's events start again from the
  // state then; the bucket the range began in gets back what it held
  // before the summary.
  enter(g, kFrom, kTo) {
    const w = this.width, L0 = this.levels[0];
    const first = Math.max(kFrom + 1, Math.floor(g.tPre / w));
    for (let j = first; j <= kTo; j++) {
      const inner = j * w > g.tPre && (j + 1) * w <= g.tLast;
      if (inner) {
        const b = L0[j];
        b.fill(0, B_EVENTS);
        b.set(g.mem.cur, 0); b.set(g.mem.cur, B_LAST);
      } else if (g.snap && g.snap.w === w && g.snap.k === j && (j + 1) * w <= g.tLast) {
        L0[j].set(g.snap.b);
      } else continue;
      // The summary's counts placed in it went with it.
      const cs = g.counts;
      while (g.ci < cs.length && cs[g.ci].t < j * w) g.ci++;
      for (let q = g.ci; q < cs.length && cs[q].t < (j + 1) * w; q++) cs[q].wiped = true;
    }
    g.snap = null;
    this.dirty(first, kTo);
  }

  // finish takes the summary's counts out of the buckets that kept them.
  finish(g) {
    const w = this.width, L0 = this.levels[0];
    for (const e of g.counts) {
      if (e.wiped) continue;
      const b = L0[Math.floor(e.t / w)];
      b[B_EVENTS] -= e.events; b[B_ALLOCS] -= e.allocs; b[B_FREES] -= e.frees;
      this.dirty(Math.floor(e.t / w), Math.floor(e.t / w));
    }
  }

  extend(t) {
    while (Math.floor(t / this.width) >= this.maxBuckets) this.coarsen();
    const k0 = Math.floor(t / this.width);
    if (k0 < this.levels[0].length) return;
    // The level-0 bucket closes; fold the levels above once the level-1
    // bucket closes too (until then a later up folds this one with it).
    if (Math.floor(k0 / 4) !== Math.floor((this.levels[0].length - 1) / 4)) this.up();
    for (let l = 0, f = 1; l < this.levels.length; l++, f *= 4) {
      const k = Math.floor(k0 / f), lv = this.levels[l];
      if (k < lv.length) break; // and so every level above
      while (lv.length <= k) {
        const b = bucket();
        b.set(this.cur, 0); b.set(this.cur, B_LAST);
        lv.push(b);
      }
    }
  }

  // up recomputes the last bucket of every level above 0 from its
  // children. Events update level 0 only (the hot path, a million events
  // a second); the levels above catch up when a level-0 bucket closes and
  // before a query, at a cost of four merges per level (and, after a
  // backfill, from the first bucket it changed).
  up() {
    const from = this.dirtyFrom, to = this.dirtyTo;
    this.dirtyFrom = Infinity; this.dirtyTo = -1;
    for (let l = 1, f = 4; l < this.levels.length; l++, f *= 4) {
      const lv = this.levels[l], below = this.levels[l - 1];
      if (!lv.length) continue;
      const last = lv.length - 1;
      if (from <= to) for (let k = Math.floor(from / f); k <= Math.min(Math.floor(to / f), last - 1); k++) this.fold(lv[k], below, k);
      this.fold(lv[last], below, last);
    }
  }

  fold(b, below, k) {
    b.set(below[4 * k]);
    for (let c = 4 * k + 1; c < Math.min(4 * k + 4, below.length); c++) merge(b, below[c]);
  }

  // dirty notes that backfill changed level-0 buckets k0..k1.
  dirty(k0, k1) {
    this.dirtyFrom = Math.min(this.dirtyFrom, k0);
    this.dirtyTo = Math.max(this.dirtyTo, k1);
  }

  coarsen() {
    this.up();
    // A range not replayed yet keeps what the bucket it began in held
    // before its summary, at the coarser width too.
    for (const g of this.gaps) {
      const s = g.snap, L0 = this.levels[0];
      if (!s || s.w !== this.width) continue;
      const k4 = s.k - (s.k % 4), b = Float64Array.from(k4 < s.k ? L0[k4] : s.b);
      for (let j = k4 + 1; j < s.k; j++) merge(b, L0[j]);
      if (k4 < s.k) merge(b, s.b);
      g.snap = { w: this.width * 4, k: k4 / 4, b };
    }
    const top = this.levels[this.levels.length - 1], next = [];
    top.forEach((b, i) => {
      if (i % 4 === 0) next.push(Float64Array.from(b));
      else merge(next[next.length - 1], b);
    });
    this.levels.shift();
    this.levels.push(next);
    this.width *= 4;
  }

  set(v, x) {
    this.cur[v] = x;
    const l = this.levels[0], b = l[l.length - 1];
    b[B_LAST + v] = x;
    if (x > b[v]) b[v] = x;
  }

  count(i, n = 1) {
    const l = this.levels[0];
    l[l.length - 1][i] += n;
  }

  /** The end of the trace so far, ns. */
  end() { return this.levels[0].length ? this.lastTime : 0; }

  /**
   * Buckets of [t0, t1) for `px` pixels, in the server's JSON shape
   * ({t0, t1, events, max: {category: [...], allocated, ...}, last}).
   */
  query(t0, t1, px) {
    t0 = Math.max(0, t0);
    const end = this.levels[0].length * this.width;
    if (!(t1 > 0) || t1 > end) t1 = end;
    if (t1 <= t0) return [];
    this.up();
    px = Math.max(1, Math.min(px | 0, 16384));
    const span = t1 - t0, per = span / px;
    let l = 0, w = this.width;
    while (l + 1 < this.levels.length && w * 4 <= per) { l++; w *= 4; }
    const lv = this.levels[l];
    const k0 = Math.floor(t0 / w), k1 = Math.min(Math.floor((t1 - 1) / w), lv.length - 1);
    const out = [];
    // One scratch bucket: a query runs every frame while a kernel streams.
    const acc = this.scratch || (this.scratch = new Float64Array(B_SIZE));
    let p = -1, accT0 = 0;
    for (let k = k0; k <= k1; k++) {
      const q = Math.floor((Math.max(k * w - t0, 0) * px) / span);
      if (q !== p) {
        if (p >= 0) out.push(toJSON(acc, accT0, k * w));
        p = q; acc.set(lv[k]); accT0 = k * w;
      } else merge(acc, lv[k]);
    }
    if (p >= 0) out.push(toJSON(acc, accT0, (k1 + 1) * w));
    return out;
  }
}

// The memory state: timeline/memstate's rules, mirrored (its package
// documentation states them; memstate.golden.json, written by its Go
// tests, holds both sides to them). cur is the values array the state
// keeps current; outside and deviceCounted are memstate's Outside and
// Counted(DeviceUsed).
function memState(cur) { return { cur, outside: 0, deviceCounted: false }; }

function copyMem(m) { return { cur: Float64Array.from(m.cur), outside: m.outside, deviceCounted: m.deviceCounted }; }

// summarised takes up the values a catch-up summary left in m.cur: what
// the device used beyond the reserved is, until a counter says, outside.
function summarised(m) {
  if (!m.deviceCounted) m.outside = Math.max(0, m.cur[V_DEVICE] - m.cur[V_RESERVED]);
}

// memAlloc applies an alloc to the values cur, as memstate's Alloc does,
// and records each value it changes in bucket b: its maximum, and its last
// value when lastOK. The callers have already told the kinds apart, so
// memAlloc and memFree do not again. (Split from memDevice so that the hot
// path stays small.)
function memAlloc(cur, b, lastOK, cat, size) {
  const c = cat < NUM_CATEGORIES ? cat : CATEGORY.other;
  put(cur, b, lastOK, c, cur[c] + size);
  put(cur, b, lastOK, V_ALLOCATED, cur[V_ALLOCATED] + size);
}

// memFree applies a free, as memstate's Free does, recording as memAlloc.
function memFree(cur, b, lastOK, cat, size) {
  const c = cat < NUM_CATEGORIES ? cat : CATEGORY.other;
  put(cur, b, lastOK, c, Math.max(0, cur[c] - size));
  put(cur, b, lastOK, V_ALLOCATED, Math.max(0, cur[V_ALLOCATED] - size));
}

// memDevice applies a segment or counter event to m, as memstate's Apply
// does, recording in b as memAlloc does. counters maps counter string ids
// to V_DEVICE or V_GOHEAP. Other events change nothing.
function memDevice(m, counters, b, lastOK, kind, size, label, extra) {
  const cur = m.cur;
  if (kind === KIND.segmentAlloc || kind === KIND.segmentFree) {
    const sign = kind === KIND.segmentAlloc ? 1 : -1;
    if (extra === POOL.outside) m.outside = Math.max(0, m.outside + sign * size);
    else put(cur, b, lastOK, V_RESERVED, Math.max(0, cur[V_RESERVED] + sign * size));
    if (!m.deviceCounted) put(cur, b, lastOK, V_DEVICE, cur[V_RESERVED] + m.outside);
  } else if (kind === KIND.counter) {
    const v = counters.get(label);
    if (v === undefined) return;
    if (v === V_DEVICE) m.deviceCounted = true;
    put(cur, b, lastOK, v, size);
  }
}

function put(cur, b, lastOK, v, x) {
  cur[v] = x;
  if (x > b[v]) b[v] = x;
  if (lastOK) b[B_LAST + v] = x;
}

// bucket answers a zeroed bucket, carved from a shared block: a new
// Float64Array of its own costs ten times as much, and a live kernel opens
// thousands of buckets a second.
let block = null, blockOff = 0;
function bucket() {
  if (!block || blockOff + B_SIZE > block.length) { block = new Float64Array(B_SIZE * 1024); blockOff = 0; }
  blockOff += B_SIZE;
  return block.subarray(blockOff - B_SIZE, blockOff);
}

function merge(a, b) {
  for (let v = 0; v < NUM_VALUES; v++) if (b[v] > a[v]) a[v] = b[v];
  for (let v = 0; v < NUM_VALUES; v++) a[B_LAST + v] = b[B_LAST + v];
  a[B_EVENTS] += b[B_EVENTS]; a[B_ALLOCS] += b[B_ALLOCS]; a[B_FREES] += b[B_FREES];
}

function values(b, off) {
  const category = new Array(NUM_CATEGORIES);
  for (let c = 0; c < NUM_CATEGORIES; c++) category[c] = b[off + c];
  return {
    category,
    allocated: b[off + V_ALLOCATED], reserved: b[off + V_RESERVED],
    device_used: b[off + V_DEVICE], go_heap: b[off + V_GOHEAP],
  };
}

function toJSON(b, t0, t1) {
  return { t0, t1, events: b[B_EVENTS], allocs: b[B_ALLOCS], frees: b[B_FREES], max: values(b, 0), last: values(b, B_LAST) };
}

/** flat turns server Values into an array indexed like the pyramid's values. */
export function flat(v) { return flatInto(new Float64Array(NUM_VALUES), v); }

function flatInto(a, v) {
  for (let c = 0; c < NUM_CATEGORIES; c++) a[c] = v.category[c] || 0;
  a[V_ALLOCATED] = v.allocated; a[V_RESERVED] = v.reserved; a[V_DEVICE] = v.device_used; a[V_GOHEAP] = v.go_heap || 0;
  return a;
}
