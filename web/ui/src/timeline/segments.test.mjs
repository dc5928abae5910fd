import { test } from "node:test";
import assert from "node:assert/strict";
import { ORDERS, instantText, orderSegments, summarize } from "./segments.js";

test("segments summary: fragmentation is the free space one request cannot use", () => {
  const seg = (size, ...blocks) => ({ size, blocks });
  // Two segments of 1 MiB, each with 256 KiB free in two runs of 128 KiB:
  // 512 KiB free in all, but no request over 128 KiB fits.
  const s = {
    reserved: 2 << 20, allocated: 1536 << 10, requested: 1500 << 10,
    free_in_segments: 512 << 10, largest_free: 128 << 10,
    segments: [seg(1 << 20), seg(1 << 20)],
  };
  const sum = summarize(s);
  assert.equal(sum.fragmentation, 0.75);
  assert.equal(sum.fragText, "fragmentation 75%");
  assert.equal(sum.reserved, "reserved 2.0 MiB in 2 segments");
  assert.equal(sum.free, "free inside segments 512 KiB, largest free run 128 KiB");
  // One free run: none of it is lost to fragmentation.
  assert.equal(summarize({ ...s, largest_free: 512 << 10 }).fragmentation, 0);
  assert.equal(summarize({ ...s, free_in_segments: 0, largest_free: 0 }).fragText, "no free space inside segments");
});

test("segments order: by category by default, biggest category first; size, free space and address on demand", () => {
  // Weights reserved first (low addresses), then the KV cache, then an
  // empty cached segment: by address, the weights lead.
  const g = (address, size, allocated, category) => ({ address, size, allocated, category });
  const segs = [g(0x1000, 2, 2, "weights"), g(0x2000, 8, 8, "weights"), g(0x3000, 4, 4, "kv_cache"), g(0x4000, 16, 12, "kv_cache"), g(0x5000, 6, 0, undefined)];
  const byCategory = [{ category: "kv_cache", bytes: 20 }, { category: "weights", bytes: 10 }];
  const addrs = (order) => orderSegments(segs, order, byCategory).map((s) => s.address.toString(16));
  assert.equal(ORDERS[0].value, "category");
  assert.deepEqual(addrs("category"), ["4000", "3000", "2000", "1000", "5000"]);
  assert.deepEqual(addrs("size"), ["4000", "2000", "5000", "3000", "1000"]);
  assert.deepEqual(addrs("free"), ["5000", "4000", "2000", "3000", "1000"]);
  assert.deepEqual(addrs("address"), ["1000", "2000", "3000", "4000", "5000"]);
  // The input is left as it was.
  assert.equal(segs[0].address, 0x1000);
});

test("segments slider: its time to the precision of one step", () => {
  assert.equal(instantText(1_153_123_456, 3e6), "1.153 s"); // a whole run: 3 ms a step
  assert.equal(instantText(1_462_920_123, 366), "1.462920 s"); // zoomed onto an OOM
  assert.equal(instantText(604_500_000, 2e5), "604.5 ms"); // 0.2 ms a step
  assert.equal(instantText(604_500_000, 2e4), "604.50 ms");
  assert.equal(instantText(0, 1e6), "0 ns");
});
