import { test } from "node:test";
import assert from "node:assert/strict";
import { summarize } from "./segments.js";

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
