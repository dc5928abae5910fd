// node --test web/ui/src/timeline/: the browser's decoder reads the frame
// the Go encoder wrote (server/live TestFrameRoundTrip, frame.golden).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { decodeFrame, eventAt, buffers } from "./streamcodec.js";

test("decodes server/live/testdata/frame.golden", () => {
  const b = readFileSync(new URL("../../../../server/live/testdata/frame.golden", import.meta.url));
  const c = decodeFrame(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  assert.equal(c.n, 2);
  assert.equal(c.backfill, true);
  // [seq, time, kind, category, expect, addr, size, requested, scope, site, label, extra]
  assert.deepEqual(eventAt(c, 0), [7, 123456789, 1, 2, 3, 0x7f1234567890, 2 ** 40, 2 ** 40 - 3, 99, 5, 6, 2]);
  assert.deepEqual(eventAt(c, 1), [8, 123456000, 2, 0, 0, 2 ** 53 - 1, 512, 0, 0, 0, 0, 0]);
  assert.ok(buffers(c).length >= 1);
  assert.throws(() => decodeFrame(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength - 1)), /events frame of/);
});
