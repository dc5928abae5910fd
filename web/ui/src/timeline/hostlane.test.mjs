// node --test: the host lane's scale is its own, not the device chart's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { hostScale, hostPath, HOST_H, HOST_MIN_SCALE } from "./hostlane.js";
import { columns } from "./columns.js";

const GiB = 2 ** 30;
const bucket = (t0, go_heap, device_used = 16 * GiB) => ({ t0, t1: t0 + 10, max: { go_heap, device_used, allocated: 0, reserved: 0, category: [] } });
// One column a nanosecond: each 10 ns bucket is ten columns.
const heapOf = (bs) => columns(bs, (t) => t, 30).lines.go_heap;

test("a 3 GiB host growth fills the lane beside a 16 GiB device", () => {
  const heap = heapOf([bucket(0, 100 * 2 ** 20), bucket(10, 1.5 * GiB), bucket(20, 3 * GiB)]);
  const ymax = hostScale(heap);
  assert.equal(ymax, 3 * GiB);
  const pts = hostPath(heap, 100, HOST_H, ymax);
  // A step line: a start, two steps of two points, an end.
  assert.deepEqual(pts.map((p) => p[0]), [0, 10, 10, 20, 20, 30]);
  const ys = pts.map((p) => p[1]);
  // The top of the growth reaches the lane's top area, the start sits near its bottom.
  assert.ok(Math.min(...ys) <= 100 + 14 + 0.001, `top ${Math.min(...ys)}`);
  assert.ok(ys[0] > 100 + HOST_H - 5, `start ${ys[0]}`);
});

test("columns without a sample are skipped; no samples, no path", () => {
  const heap = heapOf([bucket(0, 0), bucket(10, 5 * 2 ** 20), bucket(20, 0)]);
  assert.deepEqual(hostPath(heap, 0, HOST_H, hostScale(heap)).map((p) => p[0]), [10, 20]);
  assert.equal(hostScale(heapOf([bucket(0, 0)])), 0);
  // A 5 MiB heap is drawn on the lane's smallest scale, low in the lane.
  assert.equal(hostScale(heap), HOST_MIN_SCALE);
  const [[, y]] = hostPath(heap, 0, HOST_H, hostScale(heap));
  assert.ok(y > HOST_H * 0.7, `5 MiB drawn at ${y} of ${HOST_H}`);
  assert.deepEqual(hostPath(heapOf([bucket(0, 0)]), 0, HOST_H, 0), []);
});
