// Per-line memory of notebook cells, for the editor's gutter (as
// pytorch_memlab's and Scalene's line profilers annotate lines): from the
// sites of a live kernel's events, the bytes each cell line allocated, the
// peak of what it held, and what it left lingering: objects expected to
// die with the cell (or a narrower scope) still alive when the cell's scope
// ended. (The server's analyzer applies the full rule to every scope; this
// is its cell-level part, computed in the browser as events arrive.)
// Events of a range the stream summarised first are counted when they
// arrive later (the stream backfills them in order).

import { KIND, SCOPE } from "./wire.gen.js";
import { bytes } from "./palette.js";

export class LineStats {
  constructor() {
    this.sites = new Map(); // site id → "cell\0line"
    this.strings = new Map();
    this.stats = new Map(); // "cell\0line" → {cell, line, alloc, live, peak, lingering}
    this.live = new Map(); // addr → {st, size, expect, run}
    this.runs = new Map(); // cell scope id → Set of addrs allocated in it
    this.openRuns = []; // open cell scope ids, innermost last
    this.dirty = new Set(); // cells changed since the last flush
  }

  defs(m) {
    for (const [id, s] of m.strings) this.strings.set(id, s);
    for (const [id, cell, line] of m.sites) if (cell) this.sites.set(id, `${cell}\0${line}`);
  }

  add(e) {
    const kind = e[2], expect = e[4], addr = e[5], size = e[6], site = e[9];
    switch (kind) {
      case KIND.alloc: {
        const key = this.sites.get(site);
        if (!key) return;
        let st = this.stats.get(key);
        if (!st) {
          const [cell, line] = key.split("\0");
          st = { cell, line: +line, alloc: 0, live: 0, peak: 0, lingering: 0 };
          this.stats.set(key, st);
        }
        st.alloc += size; st.live += size; st.peak = Math.max(st.peak, st.live);
        const run = this.openRuns[this.openRuns.length - 1];
        this.live.set(addr, { st, size, expect, run, lingering: false });
        if (run !== undefined) this.runs.get(run)?.add(addr);
        this.dirty.add(st.cell);
        break;
      }
      case KIND.free: {
        const o = this.live.get(addr);
        if (!o) return;
        this.live.delete(addr);
        o.st.live -= o.size;
        if (o.lingering) o.st.lingering -= o.size;
        if (o.run !== undefined) this.runs.get(o.run)?.delete(addr);
        this.dirty.add(o.st.cell);
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
            o.lingering = true; o.st.lingering += o.size; this.dirty.add(o.st.cell);
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
      byCell.get(st.cell).set(st.line, {
        text: st.lingering > 0 ? `▲ ${bytes(st.lingering)}` : bytes(st.alloc),
        title: `allocated ${bytes(st.alloc)}, peak ${bytes(st.peak)}, alive ${bytes(st.live)}, left lingering ${bytes(st.lingering)}`,
        lingering: st.lingering > 0,
      });
    }
    for (const [cell, m] of byCell) nb.setLineAnnotations(cell, m);
    this.dirty.clear();
  }
}
