// node --test: buckets binned into pixel columns keep each column's
// largest values, and the outlines drawn from them follow the columns.
import { test } from "node:test";
import assert from "node:assert/strict";
import { columns, areaPath, linePath } from "./columns.js";
import { CATEGORIES } from "./wire.gen.js";

const KV = CATEGORIES.indexOf("kv_cache"), ACT = CATEGORIES.indexOf("activation");
const bucket = (t0, t1, kv, act, allocated) => {
  const category = new Array(CATEGORIES.length).fill(0);
  category[KV] = kv; category[ACT] = act;
  return { t0, t1, max: { category, allocated, reserved: allocated * 2 } };
};

test("three buckets a pixel: each column has the largest of those that touch it", () => {
  // 12 buckets of 1 ns on x = t / 3: columns 0..3, three buckets each.
  const bs = [];
  for (let i = 0; i < 12; i++) bs.push(bucket(i, i + 1, 100 * i, 1000 - i, 10 * i));
  const { n, nc, cat, lines, covered } = columns(bs, (t) => t / 3, 4);
  assert.equal(n, 4);
  for (let c = 0; c < 4; c++) {
    // Column c holds buckets 3c..3c+2: kv grows (the last is largest), act shrinks (the first is).
    assert.equal(cat[c * nc + KV], 100 * (3 * c + 2));
    assert.equal(cat[c * nc + ACT], 1000 - 3 * c);
    assert.equal(lines.allocated[c], 10 * (3 * c + 2));
    assert.equal(lines.reserved[c], 20 * (3 * c + 2));
    assert.ok(Number.isNaN(lines.device_used[c]));
    assert.equal(covered[c], 1);
  }
});

test("a bucket wider than a pixel fills every column it spans; a narrow one at least one; outside the view none", () => {
  const bs = [bucket(0, 5, 7, 0, 1), bucket(5.2, 5.4, 9, 0, 1), bucket(-10, -2, 99, 0, 1), bucket(20, 30, 99, 0, 1)];
  const { nc, cat, covered } = columns(bs, (t) => t, 8);
  assert.deepEqual([...covered], [1, 1, 1, 1, 1, 1, 0, 0]);
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 7].map((c) => cat[c * nc + KV]), [7, 7, 7, 7, 7, 9, 0, 0]);
});

test("allocations add up: a column has those of the buckets in it, a wide bucket's spread by share", () => {
  const b = (t0, t1, allocs) => ({ ...bucket(t0, t1, 1, 0, 1), allocs });
  // Three narrow buckets in column 0; one of 4 columns' width over 2..6;
  // one half in column 6 and half in 7.
  const bs = [b(0, 0.3, 5), b(0.3, 0.6, 7), b(0.6, 1, 11), b(2, 6, 100), b(6.5, 7.5, 10)];
  const { allocs } = columns(bs, (t) => t, 8);
  assert.deepEqual([...allocs], [23, 0, 25, 25, 25, 25, 5, 5]);
  let sum = 0;
  for (const v of allocs) sum += v;
  assert.equal(sum, bs.reduce((a, x) => a + x.allocs, 0), "every allocation in one column or another");
});

// A recording context: the path's points, sub-path by sub-path.
function recorder() {
  const paths = [];
  return { paths, moveTo(x, y) { paths.push([[x, y]]); }, lineTo(x, y) { paths.at(-1).push([x, y]); }, closePath() {} };
}

test("an area is one outline per run of columns, corners only where a value changes", () => {
  const top = [Infinity, 5, 5, 3, Infinity, 2, 2];
  const ctx = recorder();
  assert.ok(areaPath(ctx, top.length, top, top.map(() => 10)));
  assert.deepEqual(ctx.paths, [
    [[1, 5], [3, 5], [3, 3], [4, 3], [4, 10], [1, 10]],
    [[5, 2], [7, 2], [7, 10], [5, 10]],
  ]);
  assert.equal(areaPath(recorder(), 3, [Infinity, Infinity, Infinity], [10, 10, 10]), false);
});

test("a line steps where its value changes and goes across columns without one", () => {
  const v = [NaN, 4, 4, NaN, 4, 6, NaN];
  assert.deepEqual(linePath(v.length, (i) => v[i], (x) => -x), [[1, -4], [5, -4], [5, -6], [6, -6]]);
  assert.deepEqual(linePath(3, () => NaN, (x) => x), []);
});
