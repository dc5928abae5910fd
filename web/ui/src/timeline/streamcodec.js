// The timeline stream's binary events frame (docs/timeline-stream.md;
// server/live.AppendFrame writes it): little-endian, a 32-byte header ("LT",
// version 2, flags; the event count as uint32; the first event's sequence
// number as uint64 and time as int64; a mask of the columns present), then
// the columns present: the 4-byte ones, then the 1-byte ones, each aligned
// for a typed-array view. Every 64-bit field comes whole, as two uint32
// columns (low and high halves). A column left out is all zeros; times are
// int32 offsets from the first event's.

export const FRAME_HEADER = 32, FRAME_BACKFILL = 1, FRAME_VERSION = 2;

// Columns in the order of their mask bits: uint32 up to BYTES, uint8 after.
const COLS = ["sizeLo", "sizeHi", "requestedLo", "requestedHi", "extraLo", "extraHi", "scopeLo", "scopeHi",
  "time", "addrLo", "addrHi", "site", "label", "kind", "category", "expect"];
const TIME = 8, BYTES = 13;
// The 64-bit fields, also given as Numbers (hi·2^32 + lo: exact below 2^53).
export const WIDE = ["size", "requested", "extra", "scope"];
const TWO32 = 4294967296;

/**
 * decodeFrame answers a frame's columns: {n, first, backfill, time, size,
 * requested, extra, scope (Float64Array), sizeLo, sizeHi, requestedLo,
 * requestedHi, extraLo, extraHi, scopeLo, scopeHi, addrLo, addrHi, site,
 * label (Uint32Array), kind, category, expect (Uint8Array)}; row i is the
 * event with sequence number first+i. size, requested, extra and scope are
 * Numbers, exact below 2^53 (bytes, counts, ids); their Lo/Hi halves are
 * exact always (wideAt, cellRunAt). Columns that arrive are views over buf
 * (an ArrayBuffer); the others (times, the Numbers, absent columns, which
 * share one array of zeros per type: read them only) are new arrays, so a
 * caller transferring the frame transfers buffers(cols). It throws on a
 * frame it does not know.
 */
export function decodeFrame(buf) {
  const dv = new DataView(buf);
  if (buf.byteLength < FRAME_HEADER || dv.getUint8(0) !== 0x4c || dv.getUint8(1) !== 0x54 || dv.getUint8(2) !== FRAME_VERSION) {
    throw new Error(`timeline: not a version ${FRAME_VERSION} events frame`);
  }
  const flags = dv.getUint8(3), n = dv.getUint32(4, true);
  const first = dv.getUint32(12, true) * TWO32 + dv.getUint32(8, true);
  const base = dv.getInt32(20, true) * TWO32 + dv.getUint32(16, true);
  const present = dv.getUint16(24, true);
  const width = (c) => (c < BYTES ? 4 : 1);
  let size = FRAME_HEADER;
  for (let c = 0; c < COLS.length; c++) if (present & (1 << c)) size += n * width(c);
  if (!(present & (1 << TIME)) || dv.getUint16(26, true) || dv.getUint32(28, true) || buf.byteLength !== size) {
    throw new Error(`timeline: events frame of ${buf.byteLength} bytes for ${n} events`);
  }
  const out = { n, first, backfill: (flags & FRAME_BACKFILL) !== 0 };
  let o = FRAME_HEADER, zero32 = null, zero8 = null, zero64 = null;
  for (let c = 0; c < COLS.length; c++) {
    const w = width(c);
    if (!(present & (1 << c))) {
      out[COLS[c]] = w === 4 ? (zero32 ||= new Uint32Array(n)) : (zero8 ||= new Uint8Array(n));
      continue;
    }
    let a = c === TIME ? new Int32Array(buf, o, n) : w === 4 ? new Uint32Array(buf, o, n) : new Uint8Array(buf, o, n);
    o += n * w;
    if (c === TIME) { const t = new Float64Array(n); for (let i = 0; i < n; i++) t[i] = base + a[i]; a = t; }
    out[COLS[c]] = a;
  }
  for (let k = 0; k < WIDE.length; k++) {
    const lo = 1 << (2 * k), hi = lo << 1, name = WIDE[k];
    if (!(present & (lo | hi))) { out[name] = zero64 ||= new Float64Array(n); continue; }
    const L = out[name + "Lo"], H = out[name + "Hi"], v = new Float64Array(n);
    if (present & hi) for (let i = 0; i < n; i++) v[i] = H[i] * TWO32 + L[i];
    else for (let i = 0; i < n; i++) v[i] = L[i];
    out[name] = v;
  }
  return out;
}

/** buffers answers the distinct ArrayBuffers under columns c, to transfer them. */
export function buffers(c) {
  return [...new Set([...COLS, ...WIDE].map((k) => c[k].buffer))];
}

/** wideAt answers row i's 64-bit field name ("size", "requested", "extra", "scope", "addr") exactly, as a BigInt. */
export function wideAt(c, name, i) {
  return (BigInt(c[name + "Hi"][i]) << 32n) | BigInt(c[name + "Lo"][i]);
}

/**
 * cellRunAt reads a cell scope_begin's run at row i (Go: event.CellRunOf):
 * {count (the execution count, Requested), position (its place, 1-based;
 * 0 unknown: Size bits 16–31), source (its source's hash: bits 32–63),
 * flags (bits 0–15)}.
 */
export function cellRunAt(c, i) {
  const lo = c.sizeLo[i];
  return { count: c.requested[i], position: lo >>> 16, source: c.sizeHi[i], flags: lo & 0xffff };
}

/** eventAt answers row i of columns c in the stream's JSON array form (docs/timeline.md). */
export function eventAt(c, i) {
  return [c.first + i, c.time[i], c.kind[i], c.category[i], c.expect[i], c.addrHi[i] * TWO32 + c.addrLo[i],
    c.size[i], c.requested[i], c.scope[i], c.site[i], c.label[i], c.extra[i]];
}
