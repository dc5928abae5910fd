// Object stacking for the object view, as in PyTorch's active memory
// timeline: each object is a band from its allocation to its free, and
// bands are stacked so that none overlaps another alive at the same time.
// First fit in allocation order: an object goes at the lowest offset free
// of every object still alive when it is allocated. The objects are the N
// largest in view (at most a few hundred), so quadratic is fine.

/**
 * stack sets o.y (bytes from the bottom) on each object and returns the
 * total height in bytes. end is the time used for objects not yet freed.
 */
export function stack(objects, end) {
  const sorted = [...objects].sort((a, b) => a.alloc_time - b.alloc_time || a.seq - b.seq);
  const active = []; // objects placed, alive at the current allocation
  let height = 0;
  for (const o of sorted) {
    const t = o.alloc_time;
    for (let i = active.length - 1; i >= 0; i--) {
      const a = active[i];
      const freed = a.free_time >= 0 ? a.free_time : end;
      if (freed <= t) active.splice(i, 1);
    }
    active.sort((a, b) => a.y - b.y);
    let y = 0;
    for (const a of active) {
      if (a.y >= y + o.size) break; // fits below a
      y = Math.max(y, a.y + a.size);
    }
    o.y = y;
    active.push(o);
    height = Math.max(height, y + o.size);
  }
  return height;
}

// Time-axis ticks. The step is 1, 2 or 5 × 10^k ns, the finest whose
// labels fit between the ticks; the unit follows the values' magnitude and
// the number of decimals follows the step, so that neighbouring labels
// always differ ("1.9802 s", "1.9804 s", never "1.98 s" twice).

const UNITS = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];

/** tickLabel formats t (ns) in the unit for magnitude mag, to the precision of step. */
export function tickLabel(t, step, mag) {
  const [scale, name] = UNITS.find(([s]) => mag >= s) || UNITS[UNITS.length - 1];
  const digits = Math.max(0, Math.ceil(-Math.log10(step / scale) - 1e-9));
  return `${(t / scale).toFixed(digits)} ${name}`;
}

/**
 * axisTicks returns the ticks [{t, label}] for the view [t0, t1] ns drawn
 * width px wide; measure(label) is a label's width in px.
 */
export function axisTicks(t0, t1, width, measure, gap = 12) {
  const span = t1 - t0;
  if (!(span > 0) || !(width > 0)) return [];
  const mag = Math.max(Math.abs(t0), Math.abs(t1));
  for (let k = Math.floor(Math.log10(span / 100)); ; k++) {
    for (const m of [1, 2, 5]) {
      const step = m * 10 ** k;
      if (step < 1) continue;
      const first = Math.ceil(t0 / step), last = Math.floor(t1 / step);
      const px = (step / span) * width;
      if (last - first > 50) continue;
      // The widest label is the longest one: check the two ends.
      const w = Math.max(measure(tickLabel(first * step, step, mag)), measure(tickLabel(last * step, step, mag)));
      if (px < w + gap && last > first) continue;
      const ticks = [];
      for (let i = first; i <= last; i++) ticks.push({ t: i * step, label: tickLabel(i * step, step, mag) });
      return ticks;
    }
  }
}
