// A level-of-detail pyramid of memory values over time, built in the
// browser from the live stream: the same model as the server's
// timeline/lod (see docs/timeline.md), so that a kernel's timeline draws
// from memory without a round trip and stays bounded however long the
// kernel runs. Level 0 has buckets of `width` ns; level l is 4^l wider.
// Past maxBuckets level-0 buckets the finest level is dropped. Unlike the
// server's index, events update level 0 only; see up.

export const NUM_CATEGORIES = 10;
export const V_ALLOCATED = 10, V_RESERVED = 11, V_DEVICE = 12, V_GOHEAP = 13, NUM_VALUES = 14;

// Event kinds and pools, the wire numbers of timeline/event.
export const K = { alloc: 1, free: 2, segAlloc: 3, segFree: 4, scopeBegin: 5, scopeEnd: 6, oom: 7, mark: 8, counter: 9 };
const POOL_OUTSIDE = 2;

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
    this.segDevice = 0;
    this.hasDevice = false;
    this.counters = new Map(); // string id → value index
    this.lastTime = 0;
    this.lastSeq = 0;
    this.events = 0;
  }

  /** Tells the pyramid a string definition (it follows two counters). */
  defineString(id, s) {
    if (s === "device_used") this.counters.set(id, V_DEVICE);
    else if (s === "go_heap_inuse") this.counters.set(id, V_GOHEAP);
  }

  /** Adds one event, in the stream's array form (docs/timeline.md). */
  add(e) {
    // Indexing, not destructuring: this runs for every event.
    const seq = e[0], time = e[1], kind = e[2], cat = e[3], size = e[6], label = e[10], extra = e[11];
    const t = Math.max(time, this.lastTime);
    this.lastTime = t; this.lastSeq = seq; this.events++;
    this.extend(t);
    this.count(B_EVENTS);
    switch (kind) {
      case K.alloc:
        this.count(B_ALLOCS);
        this.set(cat % NUM_CATEGORIES, this.cur[cat % NUM_CATEGORIES] + size);
        this.set(V_ALLOCATED, this.cur[V_ALLOCATED] + size);
        break;
      case K.free:
        this.count(B_FREES);
        this.set(cat % NUM_CATEGORIES, Math.max(0, this.cur[cat % NUM_CATEGORIES] - size));
        this.set(V_ALLOCATED, Math.max(0, this.cur[V_ALLOCATED] - size));
        break;
      case K.segAlloc:
      case K.segFree: {
        const sign = kind === K.segAlloc ? 1 : -1;
        if (extra !== POOL_OUTSIDE) this.set(V_RESERVED, Math.max(0, this.cur[V_RESERVED] + sign * size));
        this.segDevice = Math.max(0, this.segDevice + sign * size);
        if (!this.hasDevice) this.set(V_DEVICE, this.segDevice);
        break;
      }
      case K.counter: {
        const v = this.counters.get(label);
        if (v === V_DEVICE) this.hasDevice = true;
        if (v !== undefined) this.set(v, size);
        break;
      }
    }
  }

  /**
   * Adds a catch-up summary (server buckets for events the stream skipped):
   * each bucket's maxima and last values at its start, as if its events
   * had happened there.
   */
  addSummary(msg) {
    for (const b of msg.buckets) {
      const t = Math.max(b.t0, this.lastTime);
      this.lastTime = t;
      this.extend(t);
      const mx = flat(b.max), last = flat(b.last);
      for (let v = 0; v < NUM_VALUES; v++) this.set(v, mx[v]);
      for (let v = 0; v < NUM_VALUES; v++) this.set(v, last[v]);
      this.count(B_EVENTS, b.events); this.count(B_ALLOCS, b.allocs); this.count(B_FREES, b.frees);
    }
    this.lastSeq = msg.to;
  }

  extend(t) {
    while (Math.floor(t / this.width) >= this.maxBuckets) this.coarsen();
    const k0 = Math.floor(t / this.width);
    if (k0 < this.levels[0].length) return;
    this.up(); // the level-0 bucket closes: fold it into the levels above
    for (let l = 0; l < this.levels.length; l++) {
      const k = Math.floor(k0 / 4 ** l);
      const lv = this.levels[l];
      while (lv.length <= k) {
        const b = new Float64Array(B_SIZE);
        b.set(this.cur, 0); b.set(this.cur, B_LAST);
        lv.push(b);
      }
    }
  }

  // up recomputes the last bucket of every level above 0 from its
  // children. Events update level 0 only (the hot path, a million events
  // a second); the levels above catch up when a level-0 bucket closes and
  // before a query, at a cost of four merges per level.
  up() {
    for (let l = 1; l < this.levels.length; l++) {
      const lv = this.levels[l], below = this.levels[l - 1];
      if (!lv.length) continue;
      const k = lv.length - 1, b = lv[k];
      b.set(below[4 * k]);
      for (let c = 4 * k + 1; c < Math.min(4 * k + 4, below.length); c++) merge(b, below[c]);
    }
  }

  coarsen() {
    this.up();
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
    let acc = null, p = -1, accT0 = 0;
    const flush = (kEnd) => { if (acc) out.push(toJSON(acc, accT0, kEnd * w)); };
    for (let k = k0; k <= k1; k++) {
      const q = Math.floor((Math.max(k * w - t0, 0) * px) / span);
      if (q !== p) { flush(k); p = q; acc = Float64Array.from(lv[k]); accT0 = k * w; }
      else merge(acc, lv[k]);
    }
    flush(k1 + 1);
    return out;
  }
}

function merge(a, b) {
  for (let v = 0; v < NUM_VALUES; v++) if (b[v] > a[v]) a[v] = b[v];
  for (let v = 0; v < NUM_VALUES; v++) a[B_LAST + v] = b[B_LAST + v];
  a[B_EVENTS] += b[B_EVENTS]; a[B_ALLOCS] += b[B_ALLOCS]; a[B_FREES] += b[B_FREES];
}

function values(b, off) {
  return {
    category: Array.from(b.subarray(off, off + NUM_CATEGORIES)),
    allocated: b[off + V_ALLOCATED], reserved: b[off + V_RESERVED],
    device_used: b[off + V_DEVICE], go_heap: b[off + V_GOHEAP],
  };
}

function toJSON(b, t0, t1) {
  return { t0, t1, events: b[B_EVENTS], allocs: b[B_ALLOCS], frees: b[B_FREES], max: values(b, 0), last: values(b, B_LAST) };
}

/** flat turns server Values into an array indexed like the pyramid's values. */
export function flat(v) {
  const a = new Float64Array(NUM_VALUES);
  a.set(v.category.slice(0, NUM_CATEGORIES));
  a[V_ALLOCATED] = v.allocated; a[V_RESERVED] = v.reserved; a[V_DEVICE] = v.device_used; a[V_GOHEAP] = v.go_heap || 0;
  return a;
}
