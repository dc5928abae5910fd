// node --test: a watched service's lanes and findings, from its report's service section.
import { test } from "node:test";
import assert from "node:assert/strict";
import { laneSeries, lanePath, lanes } from "./servicelane.js";
import { counterName, clock, distinctNames } from "./service.js";

const series = [
  { sample: 1, time_ns: 0, goroutines: 10, gc_pause_p99_ns: -1 },
  { sample: 2, time_ns: 100, goroutines: 14, gc_pause_p99_ns: 2e6 },
  { sample: 3, time_ns: 200, goroutines: -1, gc_pause_p99_ns: 3e6 },
];

test("a lane skips the samples without its figure and scales to its marks", () => {
  const g = laneSeries(series, "goroutines", [11]);
  assert.deepEqual(g.pts.map((p) => p.v), [10, 14]);
  assert.ok(Math.abs(g.top - 14 * 1.1) < 1e-9);
  const gc = laneSeries(series, "gc_pause_p99_ns", [200e6]);
  assert.equal(gc.pts.length, 2);
  assert.ok(gc.top >= 200e6, "the limit is in the lane");
  assert.deepEqual(laneSeries([], "goroutines").pts, []);
});

test("the step line holds each sample to the next, the last to the end", () => {
  const { pts } = laneSeries(series, "goroutines");
  const path = lanePath(pts, (t) => t, (v) => v, 300);
  assert.deepEqual(path, [[0, 10], [100, 10], [100, 14], [300, 14]]);
});

test("the lanes say the baseline and the limit", () => {
  const [g, gc] = lanes({ goroutines: { baseline: 40, allowed: 2 }, thresholds: [{ counter: "gc_pause_p99_ns", limit: 200e6 }] });
  assert.equal(g.title, "goroutines (baseline 40 ±2)");
  assert.deepEqual(g.band, [38, 42]);
  assert.equal(gc.title, "GC pause p99 (limit 200 ms)");
  assert.equal(lanes({})[0].band, null);
});

test("counters and times read as a person says them", () => {
  assert.equal(counterName("go_heap_inuse")[0], "heap in use");
  assert.equal(counterName("go_heap_inuse")[1](1.5 * 2 ** 30), "1.5 GiB");
  assert.equal(counterName("alloc_objects_per_second chunk")[0], "allocations at chunk");
  assert.equal(counterName("gc_pause_p99_ns")[1](250e6), "250 ms");
  assert.equal(clock(12.34e9), "12.3 s");
  assert.equal(clock(602e9), "10 min 2 s");
});

test("sites that read the same are told apart by what allocated", () => {
  const table = new Map([[1, { frames: [{ func: "runtime/pprof.(*profileBuilder).build" }] }], [2, { frames: [{ func: "bufio.NewWriterSize" }] }], [3, {}]]);
  const rows = [{ site_id: 1 }, { site_id: 2 }, { site_id: 3 }];
  const short = (r) => (r.site_id === 3 ? "leak.go:9 (main.leak)" : "main.go:92 (main.handler)");
  assert.deepEqual(distinctNames(rows, short, table), ["main.go:92 (main.handler) → runtime/pprof.(*profileBuilder).build", "main.go:92 (main.handler) → bufio.NewWriterSize", "leak.go:9 (main.leak)"]);
});
