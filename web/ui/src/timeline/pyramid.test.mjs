// node --test web/ui/src/timeline/: the browser's Pyramid against a
// brute-force computation, as timeline/lod's Go tests do for the server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Pyramid, K } from "./pyramid.js";

function synth(n) {
  let seed = 42;
  const rnd = (m) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % m; };
  const evs = [], live = [];
  let t = 0;
  for (let seq = 1; seq <= n; seq++) {
    t += rnd(10) === 0 ? rnd(5_000_000) : rnd(2000);
    if (live.length === 0 || rnd(2) === 0) {
      const e = [seq, t, K.alloc, 1 + rnd(9), 0, seq, 512 * (1 + rnd(64)), 0, 0, 0, 0, 0];
      live.push(e); evs.push(e);
    } else {
      const a = live.splice(rnd(live.length), 1)[0];
      evs.push([seq, t, K.free, a[3], 0, a[5], a[6], 0, 0, 0, 0, 0]);
    }
  }
  return evs;
}

function brute(evs, t0, t1) {
  let cur = 0, mx = 0, started = false, n = 0;
  for (const e of evs) {
    if (e[1] >= t1) break;
    if (e[1] >= t0 && !started) { mx = cur; started = true; }
    cur += e[2] === K.alloc ? e[6] : -e[6];
    if (e[1] >= t0) { mx = Math.max(mx, cur); n++; }
  }
  return { max: started ? mx : cur, last: cur, events: n };
}

for (const [name, opts] of [["defaults", {}], ["coarsened", { maxBuckets: 16 }]]) {
  test(`query matches brute force (${name})`, () => {
    const evs = synth(5000), p = new Pyramid(opts);
    for (const e of evs) p.add(e);
    const end = p.end();
    for (const [t0, t1, px] of [[0, 0, 1], [0, 0, 300], [end / 3, end / 2, 7], [end - 1000, 0, 3]]) {
      const bs = p.query(t0, t1, px);
      assert.ok(bs.length > 0 && bs.length <= px, `${bs.length} buckets for ${px} px`);
      for (const b of bs) {
        const w = brute(evs, b.t0, b.t1);
        assert.equal(b.max.allocated, w.max, `max in [${b.t0}, ${b.t1})`);
        assert.equal(b.last.allocated, w.last, `last in [${b.t0}, ${b.t1})`);
        assert.equal(b.events, w.events);
      }
    }
  });
}

test("catch-up summary moves the pyramid on", () => {
  const p = new Pyramid();
  p.add([1, 0, K.alloc, 2, 0, 1, 1024, 0, 0, 0, 0, 0]);
  const v = (a) => ({ category: [0, 0, a, 0, 0, 0, 0, 0, 0, 0], allocated: a, reserved: 0, device_used: 0, go_heap: 0 });
  p.addSummary({ from: 2, to: 100, buckets: [{ t0: 5000, t1: 6000, events: 99, allocs: 50, frees: 49, max: v(9000), last: v(2048) }] });
  assert.equal(p.lastSeq, 100);
  const all = p.query(0, 0, 1)[0];
  assert.equal(all.max.allocated, 9000);
  assert.equal(all.last.allocated, 2048);
  assert.equal(all.events, 100);
});

test("line stats: allocated, peak and what a cell left lingering", async () => {
  globalThis.window = { linger: { notebook: { got: new Map(), setLineAnnotations(c, m) { this.got.set(c, m); return true; } } } };
  const { LineStats } = await import("./lines.js");
  const ls = new LineStats();
  ls.defs({ strings: [], sites: [[1, "c1", 2, []], [2, "c1", 3, []]] });
  const ev = (seq, kind, expect, addr, size, site) => [seq, seq, kind, 2, expect, addr, size, 0, 0, site, 0, 0];
  ls.add(ev(1, K.scopeBegin, 5, 100, 0, 0));
  ls.add(ev(2, K.alloc, 3, 1, 1000, 1)); // request-scoped: lingers if it survives the cell
  ls.add(ev(3, K.alloc, 7, 2, 500, 2)); // engine-scoped: expected to stay
  ls.add(ev(4, K.alloc, 3, 3, 300, 1));
  ls.add(ev(5, K.free, 0, 3, 300, 0));
  ls.add(ev(6, K.scopeEnd, 5, 100, 0, 0));
  ls.flush();
  const m = window.linger.notebook.got.get("c1");
  assert.equal(m.get(2).lingering, true);
  assert.match(m.get(2).title, /allocated 1\.3 KiB, peak 1\.3 KiB, alive 1000 B, left lingering 1000 B/);
  assert.equal(m.get(3).lingering, false);
  ls.add(ev(7, K.free, 0, 1, 1000, 0));
  ls.flush();
  assert.equal(window.linger.notebook.got.get("c1").get(2).lingering, false);
});
