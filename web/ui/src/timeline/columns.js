// The memory chart's pixel columns: level-of-detail buckets binned into the
// view's CSS-pixel columns before anything is drawn. A saved trace's answer
// has three buckets a pixel (a view's width either side), and a bucket
// narrower than a pixel drawn as a rectangle of its own made every
// category a path of thousands of overlapping, anti-aliased sub-rectangles:
// the script took 5 ms but Chromium's rasterizer 100 to 300 ms a frame
// (issue 25). Binned, a category is at most one outline per run of
// columns, vertical edges on whole pixels, and a line one point per
// change: the picture a column shows is the same (the largest value of
// each category and line among the buckets that touch it, as the server's
// own buckets are maxima), only cheaper to raster.

import { CATEGORIES } from "./wire.gen.js";

/** The lines over the stacked areas, as the buckets' max has them. */
export const LINE_KEYS = ["allocated", "reserved", "device_used", "go_heap"];

/**
 * columns bins buckets ({t0, t1, max: {category: [...], allocated, …}})
 * into W columns, column i being [i, i+1) in x: cat[i * CATEGORIES.length
 * + c] is category c's largest value among the buckets that touch column i,
 * lines[key][i] a line's (NaN where no bucket had it), covered[i] whether
 * any bucket touches the column, allocs[i] the allocations in it (a
 * bucket's spread over its columns by their share of it). A bucket is at least one column wide, as
 * it was at least a pixel when drawn alone. x maps time to x (the view's
 * axis, breaks and all).
 */
export function columns(buckets, x, W) {
  const n = Math.max(1, Math.ceil(W)), nc = CATEGORIES.length;
  const cat = new Float64Array(n * nc), covered = new Uint8Array(n);
  // One array a line, each filled by name (not looked up by key in the
  // loop: the first frames of a live view, before the JIT has settled,
  // took 20 to 30 ms here).
  const al = new Float64Array(n).fill(NaN), re = new Float64Array(n).fill(NaN), du = new Float64Array(n).fill(NaN), gh = new Float64Array(n).fill(NaN);
  const allocs = new Float64Array(n);
  for (let k = 0; k < buckets.length; k++) {
    const b = buckets[k], x0 = x(b.t0), x1 = x(b.t1);
    if (!(x1 >= 0) || !(x0 < n)) continue;
    const c0 = Math.max(0, Math.floor(x0)), c1 = Math.min(n, Math.max(c0 + 1, Math.ceil(x1)));
    const m = b.max, bc = m.category, nb = Math.min(bc.length, nc);
    const a = m.allocated ?? NaN, r = m.reserved ?? NaN, d = m.device_used ?? NaN, g = m.go_heap ?? NaN;
    // Its allocations, spread over the columns it covers by how much of
    // each (a count adds up, where the other figures are maxima).
    const na = b.allocs || 0, w = Math.max(x1 - x0, 1e-9);
    if (na) {
      if (c1 - c0 === 1) allocs[c0] += na;
      else for (let i = c0; i < c1; i++) allocs[i] += (na * (Math.min(x1, i + 1) - Math.max(x0, i))) / w;
    }
    for (let i = c0; i < c1; i++) {
      covered[i] = 1;
      const o = i * nc;
      for (let c = 1; c < nb; c++) if (bc[c] > cat[o + c]) cat[o + c] = bc[c];
      // NaN (no value yet) is replaced by any value: !(v <= NaN).
      if (a === a && !(a <= al[i])) al[i] = a;
      if (r === r && !(r <= re[i])) re[i] = r;
      if (d === d && !(d <= du[i])) du[i] = d;
      if (g === g && !(g <= gh[i])) gh[i] = g;
    }
  }
  return { n, nc, cat, lines: { allocated: al, reserved: re, device_used: du, go_heap: gh }, covered, allocs };
}

/**
 * areaPath adds to ctx's path the outline of a stacked band: over each run
 * of columns where top[i] < bottom[i] (y grows downwards; arrays of n),
 * the step line of top from left to right and back along bottom, a corner
 * only where a value changes. Returns whether anything was added.
 */
export function areaPath(ctx, n, top, bottom) {
  let any = false;
  for (let i = 0; i < n;) {
    if (!(top[i] < bottom[i])) { i++; continue; }
    let e = i + 1;
    while (e < n && top[e] < bottom[e]) e++;
    any = true;
    let prev = top[i];
    ctx.moveTo(i, prev);
    for (let j = i + 1; j < e; j++) {
      const v = top[j];
      if (v !== prev) { ctx.lineTo(j, prev); ctx.lineTo(j, v); prev = v; }
    }
    ctx.lineTo(e, prev);
    prev = bottom[e - 1];
    ctx.lineTo(e, prev);
    for (let j = e - 1; j > i; j--) {
      const v = bottom[j - 1];
      if (v !== prev) { ctx.lineTo(j, prev); ctx.lineTo(j, v); prev = v; }
    }
    ctx.lineTo(i, prev);
    ctx.closePath();
    i = e;
  }
  return any;
}

/**
 * linePath returns a line's step outline over the columns as [x, y]
 * points: a point where its value changes, columns without a value
 * skipped (the line goes straight across them, as it went across buckets
 * without one).
 */
export function linePath(n, value, y) {
  const pts = [];
  let prev = NaN, last = -1;
  for (let i = 0; i < n; i++) {
    const v = value(i);
    if (!(v === v)) continue; // NaN: no value here
    if (v !== prev) {
      if (last >= 0) pts.push([i, y(prev)]);
      pts.push([i, y(v)]);
      prev = v;
    }
    last = i;
  }
  if (last >= 0) pts.push([last + 1, y(prev)]);
  return pts;
}
