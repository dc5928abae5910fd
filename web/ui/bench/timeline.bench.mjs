// node web/ui/bench/timeline.bench.mjs (make bench): the browser's side of
// the timeline's live path, as Go's benchmarks measure the server's (issue
// 25): a stream frame's decode (streamcodec.js, the Worker's work per
// message) and the pyramid's building from events (pyramid.js: add, the
// array form; addColumns, the stream's columns); and a saved trace's
// view: the binary lod answer's decode and its binning into pixel columns.
// Figures are reported, not
// asserted, one line each in the form of `go test -bench`.
import { decodeFrame, eventAt, FRAME_HEADER } from "../src/timeline/streamcodec.js";
import { Pyramid } from "../src/timeline/pyramid.js";
import { KIND } from "../src/timeline/wire.gen.js";
import { decodeLOD } from "../src/timeline/lodcodec.js";
import { columns } from "../src/timeline/columns.js";
import { readFileSync } from "node:fs";

const EVENTS = 1_000_000, FRAME = 4096; // BenchmarkAppendFrame's frame size

// engineLike makes n events in the stream's array form ([seq, time, kind,
// category, expect, addr, size, requested, scope, site, label, extra]):
// allocations freed soon after, as server/live's engineLike trace.
function engineLike(n) {
  const evs = [];
  let t = 0, addr = 2 ** 30;
  for (let seq = 1; seq <= n; seq++) {
    t += 700;
    const j = seq >> 1;
    if (seq % 2) evs.push([seq, t, KIND.alloc, 2, 3, addr + (j % 200) * 4096, 4096 * (1 + (j % 8)), 0, 0, 1, 2, 0]);
    else evs.push([seq, t, KIND.free, 2, 0, addr + (j % 200) * 4096, 4096 * (1 + (j % 8)), 0, 0, 0, 0, 0]);
  }
  return evs;
}

// Columns (mask bits, streamcodec.js COLS) that server/live.AppendFrame
// sends for such events; the others are all zeros and left out.
const SIZE_LO = 0, TIME = 8, ADDR_LO = 9, ADDR_HI = 10, SITE = 11, LABEL = 12, KIND_C = 13, CATEGORY = 14, EXPECT = 15;

// encodeFrame writes evs as server/live.AppendFrame does (docs/timeline-stream.md).
function encodeFrame(evs) {
  const n = evs.length, cols = [SIZE_LO, TIME, ADDR_LO, ADDR_HI, SITE, LABEL, KIND_C, CATEGORY, EXPECT];
  let size = FRAME_HEADER;
  for (const c of cols) size += n * (c < KIND_C ? 4 : 1);
  const buf = new ArrayBuffer(size), dv = new DataView(buf);
  dv.setUint8(0, 0x4c); dv.setUint8(1, 0x54); dv.setUint8(2, 2); dv.setUint8(3, 0);
  dv.setUint32(4, n, true);
  dv.setBigUint64(8, BigInt(evs[0][0]), true);
  dv.setBigInt64(16, BigInt(evs[0][1]), true);
  dv.setUint16(24, cols.reduce((m, c) => m | (1 << c), 0), true);
  const get = {
    [SIZE_LO]: (e) => e[6], [TIME]: (e) => e[1] - evs[0][1], [ADDR_LO]: (e) => e[5] % 2 ** 32, [ADDR_HI]: (e) => Math.floor(e[5] / 2 ** 32),
    [SITE]: (e) => e[9], [LABEL]: (e) => e[10], [KIND_C]: (e) => e[2], [CATEGORY]: (e) => e[3], [EXPECT]: (e) => e[4],
  };
  let o = FRAME_HEADER;
  for (const c of cols) {
    for (const e of evs) {
      if (c >= KIND_C) dv.setUint8(o++, get[c](e));
      else { dv.setUint32(o, get[c](e) >>> 0, true); o += 4; }
    }
  }
  return buf;
}

// bench runs f (one op: per events) until a second has passed, after a
// warm-up, and prints its time per op and per event.
function bench(name, per, f) {
  for (let i = 0; i < 3; i++) f(i);
  let n = 0, elapsed = 0n;
  const start = process.hrtime.bigint();
  while (elapsed < 1_000_000_000n) { f(n++); elapsed = process.hrtime.bigint() - start; }
  const ns = Number(elapsed) / n;
  console.log(`${name.padEnd(32)}\t${String(n).padStart(8)}\t${ns.toFixed(0).padStart(12)} ns/op\t${(ns / per).toFixed(2).padStart(8)} ns/event`);
}

// A saved trace's view: the binary lod answer of 3900 buckets (a
// 1300-pixel view and a view's width either side, as the page asks; read
// from server/live/testdata/lod.golden's layout, its buckets repeated) into
// bucket objects, and those buckets binned into the view's pixel columns
// (columns.js), which the memory chart draws from. These run first,
// before the million events below fill the heap: after them, the
// collector's work made the decode 3.5 ms rather than 0.5, where a page's
// heap is 10 to 50 MB.
{
  const golden = readFileSync(new URL("../../../server/live/testdata/lod.golden", import.meta.url));
  const HEADER = 64, n = 3900, g = new Uint8Array(golden.buffer, golden.byteOffset, golden.byteLength);
  const per = (g.byteLength - HEADER) / 2;
  const buf = new ArrayBuffer(HEADER + n * per), u8 = new Uint8Array(buf);
  u8.set(g.subarray(0, HEADER));
  new DataView(buf).setUint32(8, n, true);
  for (let i = 0; i < n; i++) u8.set(g.subarray(HEADER + (i % 2) * per, HEADER + (i % 2 + 1) * per), HEADER + i * per);
  const f = new Float64Array(buf, HEADER);
  for (let i = 0; i < n; i++) { f[i * (per / 8)] = i * 1000; f[i * (per / 8) + 1] = (i + 1) * 1000; } // contiguous, 1 µs each
  const buckets = decodeLOD(buf).buckets;
  bench("BenchmarkJSDecodeLOD", n, () => decodeLOD(buf));
  bench("BenchmarkJSColumns", n, () => columns(buckets, (t) => (t / (n * 1000)) * 1300 * 3 - 1300, 1300));
}

const evs = engineLike(EVENTS);
const frames = [];
for (let i = 0; i < EVENTS; i += FRAME) frames.push(encodeFrame(evs.slice(i, i + FRAME)));
{
  const c = decodeFrame(frames[1]), want = evs[FRAME];
  if (JSON.stringify(eventAt(c, 0)) !== JSON.stringify(want)) throw new Error(`frame decodes as ${eventAt(c, 0)}, want ${want}`);
}
const cols = frames.map(decodeFrame);

console.log(`node ${process.version}, ${EVENTS} events, frames of ${FRAME} (${frames[0].byteLength} bytes)`);
bench("BenchmarkJSDecodeFrame", FRAME, (i) => decodeFrame(frames[i % frames.length]));
bench("BenchmarkJSPyramidAdd", EVENTS, () => { const p = new Pyramid(); for (const e of evs) p.add(e); });
bench("BenchmarkJSPyramidAddColumns", EVENTS, () => { const p = new Pyramid(); for (const c of cols) p.addColumns(c); });

