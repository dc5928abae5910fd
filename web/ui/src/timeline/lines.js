// Per-line memory of notebook cells, for the editor's gutter (as
// pytorch_memlab's and Scalene's line profilers annotate lines): from the
// sites of a live kernel's events, the bytes each cell line allocated, the
// peak of what it held, and what it left lingering: objects expected to
// die with the cell (or a narrower scope) still alive when the cell's scope
// ended. (The server's analyzer applies the full rule to every scope; this
// is its cell-level part, computed in the browser as events arrive.)
// Events of a range the stream summarised first are counted when they
// arrive later (the stream backfills them in order). An allocation made
// in a notebook function counts at the function's line and at every line
// of its call stack, as a line profiler's inclusive figures: a helper
// defined in one cell and called from another marks the calling line too.
//
// Host memory too: the kernel counts the host buffers each place made
// (host.read_document, host.clone) while they live, its "go_heap_site N"
// counters; a line whose buffers are alive says so ("host 160 MiB"),
// first after what it left lingering: the Go heap's leak, at the line
// that read what a slice keeps whole (scenario 6).

import { COUNTER, KIND, SCOPE } from "./wire.gen.js";
import { bytes } from "./palette.js";

export class LineStats {
  constructor() {
    this.sites = new Map(); // site id → ["cell\0line", ...]: the site's line, then its callers' lines
    this.strings = new Map();
    this.stats = new Map(); // "cell\0line" → {cell, line, alloc, live, peak, lingering, via, host, hostPeak, hostVia}
    this.host = new Map(); // site id → its host buffers' bytes alive, as its counter last said
    this.live = new Map(); // addr → {st, size, expect, run}
    this.runs = new Map(); // cell scope id → Set of addrs allocated in it
    this.openRuns = []; // open cell scope ids, innermost last
    this.dirty = new Set(); // cells changed since the last flush
  }

  defs(m) {
    for (const [id, s] of m.strings) this.strings.set(id, s);
    for (const [id, cell, line, , stack] of m.sites) {
      if (!cell) continue;
      const keys = [`${cell}\0${line}`];
      for (const [, c, l] of stack || []) if (c && !keys.includes(`${c}\0${l}`)) keys.push(`${c}\0${l}`);
      this.sites.set(id, keys);
    }
  }

  /** stat is the line's figures (key "cell\0line"), made at its first use. */
  stat(key) {
    let st = this.stats.get(key);
    if (!st) {
      const [cell, line] = key.split("\0");
      st = { cell, line: +line, alloc: 0, live: 0, peak: 0, lingering: 0, via: 0, host: 0, hostPeak: 0, hostVia: 0 };
      this.stats.set(key, st);
    }
    return st;
  }

  add(e) {
    const kind = e[2], expect = e[4], addr = e[5], size = e[6], site = e[9];
    switch (kind) {
      case KIND.counter: {
        const name = this.strings.get(e[10]);
        if (!name?.startsWith(COUNTER.goHeapSite)) return;
        const id = +name.slice(COUNTER.goHeapSite.length), keys = this.sites.get(id);
        if (!keys) return;
        const d = size - (this.host.get(id) || 0);
        this.host.set(id, size);
        keys.forEach((key, i) => {
          const st = this.stat(key);
          st.host += d; st.hostPeak = Math.max(st.hostPeak, st.host);
          if (i > 0) st.hostVia += d;
          this.dirty.add(st.cell);
        });
        break;
      }
      case KIND.alloc: {
        const keys = this.sites.get(site);
        if (!keys) return;
        const sts = keys.map((key, i) => {
          const st = this.stat(key);
          st.alloc += size; st.live += size; st.peak = Math.max(st.peak, st.live);
          if (i > 0) st.via += size;
          this.dirty.add(st.cell);
          return st;
        });
        const run = this.openRuns[this.openRuns.length - 1];
        this.live.set(addr, { sts, size, expect, run, lingering: false });
        if (run !== undefined) this.runs.get(run)?.add(addr);
        break;
      }
      case KIND.free: {
        const o = this.live.get(addr);
        if (!o) return;
        this.live.delete(addr);
        for (const st of o.sts) {
          st.live -= o.size;
          if (o.lingering) st.lingering -= o.size;
          this.dirty.add(st.cell);
        }
        if (o.run !== undefined) this.runs.get(o.run)?.delete(addr);
        break;
      }
      case KIND.scopeBegin:
        if (expect === SCOPE.cell) { this.openRuns.push(addr); this.runs.set(addr, new Set()); }
        break;
      case KIND.scopeEnd: {
        if (expect !== SCOPE.cell) return;
        this.openRuns = this.openRuns.filter((r) => r !== addr);
        for (const a of this.runs.get(addr) || []) {
          const o = this.live.get(a);
          if (o && o.expect >= SCOPE.layer && o.expect <= SCOPE.cell && !o.lingering) {
            o.lingering = true;
            for (const st of o.sts) { st.lingering += o.size; this.dirty.add(st.cell); }
          }
        }
        this.runs.delete(addr);
        break;
      }
    }
  }

  /** flush sends the changed cells' annotations to the notebook, if there is one. */
  flush() {
    const nb = window.linger?.notebook;
    if (!nb?.setLineAnnotations || !this.dirty.size) return;
    const byCell = new Map();
    for (const st of this.stats.values()) {
      if (!this.dirty.has(st.cell)) continue;
      if (!byCell.has(st.cell)) byCell.set(st.cell, new Map());
      const text = gutterText(st);
      if (text) byCell.get(st.cell).set(st.line, { text, title: gutterTitle(st), lingering: st.lingering > 0 });
    }
    for (const [cell, m] of byCell) nb.setLineAnnotations(cell, m);
    this.dirty.clear();
  }
}

/**
 * gutterText is a line's mark: what it left lingering (▲), else what it
 * holds now and, when higher, the most it held at once (↑), as a memory
 * profiler's line view; never the total ever allocated, which for a
 * request looping over chunks is many times what it held (the title
 * says it).
 */
export function gutterText(st) {
  if (st.lingering > 0) return `▲ ${bytes(st.lingering)}`;
  // Host buffers alive: on the Go heap, where a device chart shows nothing.
  if (st.host > 0) return `host ${bytes(st.host)}`;
  if (st.live > 0) return st.peak > st.live ? `${bytes(st.live)} ↑${bytes(st.peak)}` : bytes(st.live);
  if (st.alloc > 0) return `↑${bytes(st.peak)}`;
  // Host buffers only, all of them gone: the most it held, not a retention.
  return st.hostPeak > 0 ? `host ↑${bytes(st.hostPeak)}` : "";
}

/** gutterTitle says every figure of a line (gutterText's mark says one). */
export function gutterTitle(st) {
  const parts = [];
  if (st.alloc > 0) {
    parts.push(`alive ${bytes(st.live)}, peak ${bytes(st.peak)}, left lingering ${bytes(st.lingering)}; allocated ${bytes(st.alloc)} in all` +
      (st.via ? ` (${bytes(st.via)} of it in functions this line called)` : ""));
  }
  if (st.hostPeak > 0) {
    const via = st.hostVia ? ` (${bytes(st.hostVia)} of it made by functions this line called)` : "";
    parts.push(st.host > 0 ?
      `host buffers made here still alive: ${bytes(st.host)}${via}, on the Go heap, not the device (at most ${bytes(st.hostPeak)}); a slice of a string keeps the whole string alive: copy what you keep (host.clone)` :
      `host buffers made here: none alive now (at most ${bytes(st.hostPeak)} at once)`);
  }
  return parts.join("; ");
}
