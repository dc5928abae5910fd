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
