// node --test web/ui/src/timeline/: the browser's Pyramid against a
// brute-force computation, as timeline/lod's Go tests do for the server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Pyramid } from "./pyramid.js";
import { KIND, SCOPE, COUNTER } from "./wire.gen.js";

function synth(n) {
  let seed = 42;
  const rnd = (m) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % m; };
  const evs = [], live = [];
  let t = 0;
  for (let seq = 1; seq <= n; seq++) {
    t += rnd(10) === 0 ? rnd(5_000_000) : rnd(2000);
    if (live.length === 0 || rnd(2) === 0) {
      const e = [seq, t, KIND.alloc, 1 + rnd(9), 0, seq, 512 * (1 + rnd(64)), 0, 0, 0, 0, 0];
      live.push(e); evs.push(e);
    } else {
      const a = live.splice(rnd(live.length), 1)[0];
      evs.push([seq, t, KIND.free, a[3], 0, a[5], a[6], 0, 0, 0, 0, 0]);
    }
  }
  return evs;
}

function brute(evs, t0, t1) {
  let cur = 0, mx = 0, started = false, n = 0;
  for (const e of evs) {
    if (e[1] >= t1) break;
    if (e[1] >= t0 && !started) { mx = cur; started = true; }
    cur += e[2] === KIND.alloc ? e[6] : -e[6];
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
  p.add([1, 0, KIND.alloc, 2, 0, 1, 1024, 0, 0, 0, 0, 0]);
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
  ls.add(ev(1, KIND.scopeBegin, SCOPE.cell, 100, 0, 0));
  ls.add(ev(2, KIND.alloc, SCOPE.request, 1, 1000, 1)); // request-scoped: lingers if it survives the cell
  ls.add(ev(3, KIND.alloc, SCOPE.engine, 2, 500, 2)); // engine-scoped: expected to stay
  ls.add(ev(4, KIND.alloc, SCOPE.request, 3, 300, 1));
  ls.add(ev(5, KIND.free, 0, 3, 300, 0));
  ls.add(ev(6, KIND.scopeEnd, SCOPE.cell, 100, 0, 0));
  ls.flush();
  const m = window.linger.notebook.got.get("c1");
  assert.equal(m.get(2).lingering, true);
  assert.match(m.get(2).title, /alive 1000 B, peak 1\.3 KiB, left lingering 1000 B; allocated 1\.3 KiB in all/);
  assert.equal(m.get(2).text, "▲ 1000 B");
  assert.equal(m.get(3).lingering, false);
  assert.equal(m.get(3).text, "500 B");
  ls.add(ev(7, KIND.free, 0, 1, 1000, 0));
  ls.flush();
  assert.equal(window.linger.notebook.got.get("c1").get(2).lingering, false);
  assert.equal(window.linger.notebook.got.get("c1").get(2).text, "↑1.3 KiB");
});

test("line stats: a line looping over chunks shows its peak, not the total it allocated", async () => {
  globalThis.window = { linger: { notebook: { got: new Map(), setLineAnnotations(c, m) { this.got.set(c, m); return true; } } } };
  const { LineStats } = await import("./lines.js");
  const ls = new LineStats();
  ls.defs({ strings: [], sites: [[1, "c1", 4, []]] });
  const ev = (seq, kind, expect, addr, size, site) => [seq, seq, kind, 2, expect, addr, size, 0, 0, site, 0, 0];
  const chunk = 64 << 20, chunks = 48; // 48 chunks of 64 MiB, one at a time: 3 GiB allocated, 64 MiB held
  let seq = 1;
  ls.add(ev(seq++, KIND.scopeBegin, SCOPE.cell, 100, 0, 0));
  for (let i = 0; i < chunks; i++) {
    ls.add(ev(seq++, KIND.alloc, SCOPE.chunk, 10 + i, chunk, 1));
    ls.add(ev(seq++, KIND.free, 0, 10 + i, chunk, 0));
  }
  ls.add(ev(seq++, KIND.alloc, SCOPE.engine, 99, 16 << 20, 1)); // and 16 MiB it keeps
  ls.add(ev(seq++, KIND.scopeEnd, SCOPE.cell, 100, 0, 0));
  ls.flush();
  const a = window.linger.notebook.got.get("c1").get(4);
  assert.equal(a.text, "16 MiB ↑64 MiB");
  assert.match(a.title, /allocated 3(\.0+)? GiB in all/);
});

// columns turns array-form events lo..hi-1 into the stream's column form.
function columns(evs, lo, hi) {
  const n = hi - lo, F = (j) => Float64Array.from(evs.slice(lo, hi), (e) => e[j]);
  return {
    n, first: evs[lo][0], time: F(1), kind: Uint8Array.from(evs.slice(lo, hi), (e) => e[2]), category: Uint8Array.from(evs.slice(lo, hi), (e) => e[3]),
    expect: Uint8Array.from(evs.slice(lo, hi), (e) => e[4]), addrLo: new Uint32Array(n), addrHi: new Uint32Array(n), size: F(6), requested: F(7), scope: F(8),
    site: new Uint32Array(n), label: Uint32Array.from(evs.slice(lo, hi), (e) => e[10]), extra: F(11),
  };
}

function checkAgainst(p, evs, { boundary } = {}) {
  const end = p.end();
  for (const [t0, t1, px] of [[0, 0, 1], [0, 0, 300], [0, 0, 4096], [end / 3, end / 2, 7], [end - 1000, 0, 3]]) {
    for (const b of p.query(t0, t1, px)) {
      const w = brute(evs, b.t0, b.t1);
      assert.equal(b.events, w.events, `events in [${b.t0}, ${b.t1})`);
      assert.equal(b.last.allocated, w.last, `last in [${b.t0}, ${b.t1})`);
      if (boundary !== undefined && b.t0 <= boundary && boundary < b.t1) assert.ok(b.max.allocated >= w.max, `max in [${b.t0}, ${b.t1}) at the range's end`);
      else assert.equal(b.max.allocated, w.max, `max in [${b.t0}, ${b.t1})`);
    }
  }
}

test("columns give what events one by one give", () => {
  const evs = synth(5000), p = new Pyramid({ maxBuckets: 64 });
  for (let i = 0; i < evs.length; i += 999) p.addColumns(columns(evs, i, Math.min(i + 999, evs.length)));
  assert.equal(p.events, evs.length);
  assert.equal(p.lastSeq, evs.length);
  checkAgainst(p, evs);
});

for (const [name, opts] of [["defaults", {}], ["coarsening meanwhile", { maxBuckets: 64 }]]) {
  test(`backfill replaces a summary with its events (${name})`, () => {
    const evs = synth(20000), n = evs.length;
    const a = 4000, b = 12000, c = 16000; // live 1..a, summary a+1..b, live b+1..c, backfill, live c+1..n
    const server = new Pyramid(); // the server's index, at the summary: up to event b
    for (const e of evs.slice(0, b)) server.add(e);
    const p = new Pyramid(opts);
    p.addColumns(columns(evs, 0, a));
    const t0 = evs[a - 1][1], t1 = evs[b - 1][1] + 1;
    p.addSummary({ from: a + 1, to: b, t0, t1, backfill: true, buckets: server.query(t0, t1, 50) });
    assert.deepEqual(p.owed(), [[a + 1, b]]);
    p.addColumns(columns(evs, b, c));
    assert.equal(p.addPast(columns(evs, a + 10, a + 20)), false, "events not owed next are refused");
    for (let i = a; i < b; i += 777) {
      assert.ok(p.addPast(columns(evs, i, Math.min(i + 777, b))));
      if (opts.maxBuckets && i === a) p.addColumns(columns(evs, c, c + 1000)); // live meanwhile, coarsening
    }
    assert.deepEqual(p.owed(), []);
    p.addColumns(columns(evs, opts.maxBuckets ? c + 1000 : c, n));
    assert.equal(p.events, n);
    checkAgainst(p, evs, { boundary: evs[b - 1][1] });
  });
}

test("memory values follow timeline/memstate's rules", () => {
  // The golden file is the Go rules' answer (go test ./timeline/memstate).
  const g = JSON.parse(readFileSync(new URL("./memstate.golden.json", import.meta.url)));
  const p = new Pyramid();
  for (const [id, s] of Object.entries(g.strings)) p.defineString(+id, s);
  g.events.forEach((e, i) => {
    p.add(e);
    assert.deepEqual(Array.from(p.cur), g.values[i], `after event ${e[0]}`);
  });
});

test("the column form follows the same rules", () => {
  const g = JSON.parse(readFileSync(new URL("./memstate.golden.json", import.meta.url)));
  const col = (j, T = Float64Array) => T.from(g.events, (e) => e[j]);
  const c = { n: g.events.length, first: 1, time: col(1), kind: col(2, Uint8Array), category: col(3, Uint8Array), size: col(6), label: col(10, Uint32Array), extra: col(11) };
  const p = new Pyramid();
  for (const [id, s] of Object.entries(g.strings)) p.defineString(+id, s);
  // One event a call, so that every intermediate value is checked, not
  // only the last (device used must follow the segments, then the counter).
  for (let i = 0; i < c.n; i++) {
    p.addColumns(c, i, i + 1);
    assert.deepEqual(Array.from(p.cur), g.values[i], `after event ${g.events[i][0]}`);
  }
  assert.equal(p.lastSeq, g.events.length);
});

test("the activity a view follows: the last memory event and its cell, not samples or scope bounds", () => {
  // [seq, time, kind, category, expect, addr, size, requested, scope, site, label, extra]
  const ev = (seq, ms, kind, expect = 0) => [seq, ms * 1e6, kind, kind === KIND.alloc || kind === KIND.free ? 2 : 0, expect, seq, 4096, 4096, 0, 0, 0, 0];
  // A Go heap sample of 100 MiB + d (label 7, defined below as the counter).
  const heap = (seq, ms, d) => [seq, ms * 1e6, KIND.counter, 0, 0, 0, (100 << 20) + d, 0, 0, 0, 7, 0];
  const evs = [
    ev(1, 1, KIND.scopeBegin, SCOPE.cell), ev(2, 2, KIND.alloc), ev(3, 3, KIND.free), ev(4, 3.5, KIND.scopeEnd, SCOPE.cell),
    ev(5, 5, KIND.counter), ev(6, 9, KIND.counter), // an idle kernel's samples
    ev(7, 10, KIND.scopeBegin, SCOPE.cell), ev(8, 10.1, KIND.scopeBegin, SCOPE.request), ev(9, 10.2, KIND.scopeEnd, SCOPE.request), ev(10, 10.3, KIND.scopeEnd, SCOPE.cell), // a cell that allocates nothing
    ev(11, 12, KIND.scopeBegin, SCOPE.cell), ev(12, 12.5, KIND.alloc), ev(13, 12.6, KIND.mark), ev(14, 13, KIND.scopeEnd, SCOPE.cell), ev(15, 14, KIND.counter),
    // A cell that samples the Go heap at its ends, moved a little: not activity.
    heap(16, 15, 0), heap(17, 15.5, 0), heap(18, 15.6, 40 << 10), ev(19, 16, KIND.scopeEnd, SCOPE.cell),
    // A cell that moves the Go heap alone, by 16 MiB: activity.
    ev(20, 20, KIND.scopeBegin, SCOPE.cell), heap(21, 20.1, 0), heap(22, 20.5, 16 << 20), ev(23, 21, KIND.scopeEnd, SCOPE.cell),
  ];
  evs.splice(15, 0, ev(0, 15, KIND.scopeBegin, SCOPE.cell));
  evs.forEach((e, i) => { e[0] = i + 1; });
  // What a view follows after each event: [activeEnd, activeCell] in ms.
  const want = [[0, -1], [2, 1], [3, 1], [3, 1], [3, 1], [3, 1], [3, 1], [3, 1], [3, 1], [3, 1], [3, 1], [12.5, 12], [12.6, 12], [12.6, 12], [12.6, 12],
    [12.6, 12], [12.6, 12], [12.6, 12], [12.6, 12], [12.6, 12], [12.6, 12], [12.6, 12], [20.5, 20], [20.5, 20]];
  const got = (p) => [p.activeEnd / 1e6, p.activeCell < 0 ? -1 : p.activeCell / 1e6];
  // One event at a time, as columns and as arrays.
  const pc = new Pyramid(), pa = new Pyramid();
  for (const p of [pc, pa]) p.defineString(7, COUNTER.goHeap);
  evs.forEach((e, i) => {
    pc.addColumns(columns(evs, i, i + 1));
    pa.add(e);
    assert.deepEqual(got(pc), want[i], `columns, after event ${i + 1}`);
    assert.deepEqual(got(pa), want[i], `arrays, after event ${i + 1}`);
  });
  // In frames that split anywhere: a frame's last activity is its cell's.
  for (let cut = 1; cut < evs.length; cut++) {
    const p = new Pyramid();
    p.defineString(7, COUNTER.goHeap);
    p.addColumns(columns(evs, 0, cut));
    assert.deepEqual(got(p), want[cut - 1], `first ${cut} events in one frame`);
    p.addColumns(columns(evs, cut, evs.length));
    assert.deepEqual(got(p), want[evs.length - 1], `the rest after ${cut}`);
  }
});
