// node --test web/ui/src/timeline/: the page's decoder reads the binary lod
// answer the Go encoder wrote (server/live TestLODGolden, lod.golden) as
// the JSON answer of the same summary (lod.golden.json) reads.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { decodeLOD } from "./lodcodec.js";

const testdata = (f) => readFileSync(new URL(`../../../../server/live/testdata/${f}`, import.meta.url));
const golden = () => { const b = testdata("lod.golden"); return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength); };

test("decodes server/live/testdata/lod.golden as its JSON reads", () => {
  const got = decodeLOD(golden()), want = JSON.parse(testdata("lod.golden.json"));
  // Typed arrays become plain ones to compare.
  const plain = (v) => JSON.parse(JSON.stringify(v, (k, x) => (ArrayBuffer.isView(x) ? [...x] : x)));
  assert.deepEqual(plain(got), want);
  assert.equal(got.buckets[1].max.device_used, 2 ** 53);
  assert.equal(got.buckets.length, 2);
  // The golden answer is of a trace being read: 2^40 of 2^40 + 12345 bytes.
  assert.deepEqual(got.reading, { read_bytes: 2 ** 40, file_bytes: 2 ** 40 + 12345 });
});

test("refuses what is not an answer, whole", () => {
  const buf = golden();
  for (const bad of [new ArrayBuffer(0), buf.slice(0, buf.byteLength - 8), (() => { const b = buf.slice(0); new Uint8Array(b)[2] = 9; return b; })(), (() => { const b = buf.slice(0); new Uint8Array(b)[1] = 0x54; return b; })()]) {
    assert.throws(() => decodeLOD(bad), /lod answer/);
  }
});

test("a whole answer whose pass goes on says how far it has read (passing), not reading", () => {
  const b = golden().slice(0);
  new DataView(b).setUint32(12, 2, true); // the passing flag alone
  const got = decodeLOD(b);
  assert.equal(got.reading, undefined);
  assert.deepEqual(got.passing, { read_bytes: 2 ** 40, file_bytes: 2 ** 40 + 12345 });
  assert.equal(got.buckets.length, 2);
});
