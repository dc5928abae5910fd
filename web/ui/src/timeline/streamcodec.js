// The timeline stream's binary events frame (docs/timeline-stream.md;
// server/live.AppendFrame writes it): little-endian, a 32-byte header ("LT",
// version 1, flags; the event count as uint32; the first event's sequence
// number and time as float64; a mask of the columns present and one of the
// float64 columns sent narrow, as uint32), then the columns present, wider
// ones first so that each is aligned for a typed-array view. A column left
// out is all zeros; times are int32 offsets from the first event's.

export const FRAME_HEADER = 32, FRAME_BACKFILL = 1;

// Columns in the order of their mask bits; wide ones are float64 unless narrow.
const COLS = ["size", "requested", "extra", "scope", "time", "addrLo", "addrHi", "site", "label", "kind", "category", "expect"];
const WIDE = 4, TIME = 4, BYTES = 9;

/**
 * decodeFrame answers a frame's columns: {n, first, backfill, time, size,
 * requested, extra, scope (Float64Array), addrLo, addrHi, site, label
 * (Uint32Array), kind, category, expect (Uint8Array)}; row i is the event
 * with sequence number first+i. Columns sent as they are used are views
 * over buf (an ArrayBuffer); the others (times, narrow and absent columns)
 * are new arrays, so a caller transferring the frame transfers
 * buffers(cols). It throws on a frame it does not know.
 */
export function decodeFrame(buf) {
  const dv = new DataView(buf);
  if (buf.byteLength < FRAME_HEADER || dv.getUint8(0) !== 0x4c || dv.getUint8(1) !== 0x54 || dv.getUint8(2) !== 1) {
    throw new Error("timeline: not a version 1 events frame");
  }
  const flags = dv.getUint8(3), n = dv.getUint32(4, true), first = dv.getFloat64(8, true), base = dv.getFloat64(16, true);
  const present = dv.getUint16(24, true), narrow = dv.getUint16(26, true);
  const width = (c) => (c < WIDE && !(narrow & (1 << c)) ? 8 : c < BYTES ? 4 : 1);
  let size = FRAME_HEADER;
  for (let c = 0; c < COLS.length; c++) if (present & (1 << c)) size += n * width(c);
  if (present >> COLS.length || !(present & (1 << TIME)) || narrow >> WIDE || buf.byteLength !== size) {
    throw new Error(`timeline: events frame of ${buf.byteLength} bytes for ${n} events`);
  }
  const out = { n, first, backfill: (flags & FRAME_BACKFILL) !== 0 };
  let o = FRAME_HEADER;
  for (const w of [8, 4, 1]) {
    for (let c = 0; c < COLS.length; c++) {
      if (!(present & (1 << c)) || width(c) !== w) continue;
      const T = w === 8 ? Float64Array : c === TIME ? Int32Array : w === 4 ? Uint32Array : Uint8Array;
      let a = new T(buf, o, n);
      o += n * w;
      if (c === TIME) { const t = new Float64Array(n); for (let i = 0; i < n; i++) t[i] = base + a[i]; a = t; }
      else if (c < WIDE && w === 4) a = Float64Array.from(a);
      out[COLS[c]] = a;
    }
  }
  for (let c = 0; c < COLS.length; c++) {
    if (!out[COLS[c]]) out[COLS[c]] = c < WIDE ? new Float64Array(n) : c < BYTES ? new Uint32Array(n) : new Uint8Array(n);
  }
  return out;
}

/** buffers answers the distinct ArrayBuffers under columns c, to transfer them. */
export function buffers(c) {
  return [...new Set(COLS.map((k) => c[k].buffer))];
}

/** eventAt answers row i of columns c in the stream's JSON array form (docs/timeline.md). */
export function eventAt(c, i) {
  return [c.first + i, c.time[i], c.kind[i], c.category[i], c.expect[i], c.addrHi[i] * 4294967296 + c.addrLo[i],
    c.size[i], c.requested[i], c.scope[i], c.site[i], c.label[i], c.extra[i]];
}
