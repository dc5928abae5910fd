// node --test web/ui/src/timeline/: the browser's decoder reads the frame
// the Go encoder wrote (server/live TestFrameRoundTrip, frame.golden).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { decodeFrame, eventAt, buffers, wideAt, cellRunAt } from "./streamcodec.js";

function golden() {
  const b = readFileSync(new URL("../../../../server/live/testdata/frame.golden", import.meta.url));
  return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
}

test("decodes server/live/testdata/frame.golden", () => {
  const buf = golden(), c = decodeFrame(buf);
  assert.equal(c.n, 3);
  assert.equal(c.backfill, true);
  // [seq, time, kind, category, expect, addr, size, requested, scope, site, label, extra]
  assert.deepEqual(eventAt(c, 0), [7, 123456789, 1, 2, 3, 0x7f1234567890, 2 ** 40, 2 ** 40 - 3, 99, 5, 6, 2]);
  assert.deepEqual(eventAt(c, 1), [8, 123456000, 2, 0, 0, 2 ** 53 - 1, 2 ** 53, 0, 0, 0, 0, 0]); // 2^53+1 as a Number
  assert.ok(buffers(c).length >= 1);
  assert.throws(() => decodeFrame(buf.slice(0, buf.byteLength - 1)), /events frame of/);
  const v1 = new Uint8Array(buf.slice(0)); v1[2] = 1;
  assert.throws(() => decodeFrame(v1.buffer), /not a version 2 events frame/);
});

test("64-bit fields arrive whole", () => {
  const c = decodeFrame(golden());
  assert.equal(wideAt(c, "size", 1), 2n ** 53n + 1n);
  assert.equal(wideAt(c, "addr", 1), 2n ** 53n - 1n);
  assert.equal(wideAt(c, "requested", 0), 2n ** 40n - 3n);
  assert.equal(wideAt(c, "size", 2), 0xfffffff0n << 32n | 5n << 16n | 1n);
});

// issue 22: as a float64, this scope's Size arrived with flag 0.
test("a cell scope's place, source hash and flag arrive whole", () => {
  const c = decodeFrame(golden());
  assert.deepEqual(eventAt(c, 2).slice(0, 6), [9, 123457000, 5, 0, 5, 42]);
  assert.deepEqual(cellRunAt(c, 2), { count: 3, position: 5, source: 0xfffffff0, flags: 1 });
});
