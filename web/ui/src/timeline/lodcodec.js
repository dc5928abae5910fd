// The binary lod answer (…/lod?format=bin; server/live/lodbin.go,
// docs/timeline.md): a saved trace's view asks for one on every pan or zoom
// it has no data for, and a 3900-bucket answer as JSON is 1.4 MB to parse
// on the main thread. This one is a Float64Array over the body, the
// buckets made from it in the JSON answer's shape.

import { CATEGORIES } from "./wire.gen.js";

const HEADER = 16 + 6 * 8, VERSION = 1, PARTIAL = 1, PASSING = 2;
const NC = CATEGORIES.length, FIELDS = 5 + 2 * (NC + 4);

/**
 * decodeLOD turns a binary answer (an ArrayBuffer) into {events, last_seq,
 * end, resolution, categories, buckets}, as the JSON answer, with reading:
 * {read_bytes, file_bytes} where the answer is of the part of a saved
 * trace read so far (?partial=1; else none), and passing: the same where
 * it is whole (the pyramid the trace's writer stored) while the server's
 * pass over the trace, which objects, scopes and findings wait for, goes
 * on; throws on anything else.
 */
export function decodeLOD(buf) {
  const u8 = new Uint8Array(buf), dv = new DataView(buf);
  if (buf.byteLength < HEADER || u8[0] !== 0x4c || u8[1] !== 0x44) throw new Error(`lod answer: not one (${buf.byteLength} bytes)`);
  const fields = dv.getUint32(4, true), n = dv.getUint32(8, true);
  if (u8[2] !== VERSION || u8[3] !== NC || fields !== FIELDS) throw new Error(`lod answer: version ${u8[2]} with ${u8[3]} categories and ${fields} values a bucket, want ${VERSION}, ${NC}, ${FIELDS}`);
  if (buf.byteLength !== HEADER + n * FIELDS * 8) throw new Error(`lod answer: ${buf.byteLength} bytes for ${n} buckets`);
  // Little-endian, as every browser's typed arrays are where Linger runs
  // (x86, ARM); the header's float64s are read through the DataView.
  const f = new Float64Array(buf, HEADER, n * FIELDS);
  // Plain arrays: a typed-array view a bucket costs more to make than the copy.
  const values = (o) => {
    const category = new Array(NC);
    for (let c = 0; c < NC; c++) category[c] = f[o + c];
    return { category, allocated: f[o + NC], reserved: f[o + NC + 1], device_used: f[o + NC + 2], go_heap: f[o + NC + 3] };
  };
  const buckets = new Array(n);
  for (let i = 0, o = 0; i < n; i++, o += FIELDS) {
    buckets[i] = { t0: f[o], t1: f[o + 1], events: f[o + 2], allocs: f[o + 3], frees: f[o + 4], max: values(o + 5), last: values(o + 5 + NC + 4) };
  }
  const r = {
    events: dv.getFloat64(16, true), last_seq: dv.getFloat64(24, true), end: dv.getFloat64(32, true), resolution: dv.getFloat64(40, true),
    categories: CATEGORIES, buckets,
  };
  const flags = dv.getUint32(12, true), read = { read_bytes: dv.getFloat64(48, true), file_bytes: dv.getFloat64(56, true) };
  if (flags & PARTIAL) r.reading = read;
  if (flags & PASSING) r.passing = read;
  return r;
}
