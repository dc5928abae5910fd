// The memory chart's vertical scale: linear from 0, or logarithmic, so
// that a KV cache growing from 28 to 256 MiB under gigabytes of weights
// is a climb, not a hairline. The log scale spans OCTAVES powers of two
// below the top (from a power of two, at least LOG_FLOOR): values below
// sit on the floor.

import { bytes } from "./palette.js";

export const LOG_FLOOR = 1024;
const OCTAVES = 12;

/** logFloor is the log scale's bottom for top ymax. */
export function logFloor(ymax) { return Math.max(LOG_FLOOR, 2 ** Math.floor(Math.log2(Math.max(ymax, 1)) - OCTAVES)); }

/** yOf returns v ↦ y (CSS px) for a track of height h at top, scale top ymax. */
export function yOf(top, h, ymax, log) {
  const bottom = top + h, room = h - 4;
  if (!log) return (v) => bottom - (v / ymax) * room;
  const lo = logFloor(ymax), hi = Math.log2(Math.max(ymax, lo * 2) / lo);
  return (v) => bottom - (Math.log2(Math.max(v, lo) / lo) / hi) * room;
}

/** yTicks are the scale's labelled values [{v, label}]: 0, ½ and the top (linear), every 8× from the floor (log). */
export function yTicks(ymax, log) {
  if (!log) return [0, ymax / 2, ymax].map((v) => ({ v, label: bytes(v) }));
  const out = [];
  for (let v = logFloor(ymax); v <= ymax; v *= 8) out.push({ v, label: bytes(v) });
  return out;
}
