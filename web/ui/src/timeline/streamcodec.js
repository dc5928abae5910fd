// The timeline stream's binary events frame (docs/timeline-stream.md;
// server/live.AppendFrame writes it): little-endian, a 16-byte header
// ("LT", version 1, flags; the event count as uint32; the first event's
// sequence number as float64), then one column per field, the float64
// columns first so that each is aligned for a typed-array view. Decoding
// is therefore a handful of views over the frame's buffer, whatever its
// size: no per-event work on either thread.

export const FRAME_HEADER = 16, FRAME_EVENT_SIZE = 5 * 8 + 4 * 4 + 3, FRAME_BACKFILL = 1;

/**
 * decodeFrame answers a frame's columns, views over buf (an ArrayBuffer):
 * {n, first, backfill, time, size, requested, extra, scope (Float64Array),
 * addrLo, addrHi, site, label (Uint32Array), kind, category, expect
 * (Uint8Array)}; row i is the event with sequence number first+i. It
 * throws on a frame it does not know.
 */
export function decodeFrame(buf) {
  const dv = new DataView(buf);
  if (buf.byteLength < FRAME_HEADER || dv.getUint8(0) !== 0x4c || dv.getUint8(1) !== 0x54 || dv.getUint8(2) !== 1) {
    throw new Error("timeline: not a version 1 events frame");
  }
  const flags = dv.getUint8(3), n = dv.getUint32(4, true), first = dv.getFloat64(8, true);
  if (buf.byteLength !== FRAME_HEADER + n * FRAME_EVENT_SIZE) throw new Error(`timeline: events frame of ${buf.byteLength} bytes for ${n} events`);
  let o = FRAME_HEADER;
  const col = (T) => { const a = new T(buf, o, n); o += n * T.BYTES_PER_ELEMENT; return a; };
  const time = col(Float64Array), size = col(Float64Array), requested = col(Float64Array), extra = col(Float64Array), scope = col(Float64Array);
  const addrLo = col(Uint32Array), addrHi = col(Uint32Array), site = col(Uint32Array), label = col(Uint32Array);
  const kind = col(Uint8Array), category = col(Uint8Array), expect = col(Uint8Array);
  return { n, first, backfill: (flags & FRAME_BACKFILL) !== 0, time, size, requested, extra, scope, addrLo, addrHi, site, label, kind, category, expect };
}

/** eventAt answers row i of columns c in the stream's JSON array form (docs/timeline.md). */
export function eventAt(c, i) {
  return [c.first + i, c.time[i], c.kind[i], c.category[i], c.expect[i], c.addrHi[i] * 4294967296 + c.addrLo[i],
    c.size[i], c.requested[i], c.scope[i], c.site[i], c.label[i], c.extra[i]];
}
