// node --test: the host lane's scale is its own, not the device chart's.
import { test } from "node:test";
import assert from "node:assert/strict";
import { hostScale, hostPath, HOST_H, HOST_MIN_SCALE } from "./hostlane.js";

const GiB = 2 ** 30;
const bucket = (t0, go_heap, device_used = 16 * GiB) => ({ t0, t1: t0 + 10, max: { go_heap, device_used, allocated: 0, reserved: 0, category: [] } });

test("a 3 GiB host growth fills the lane beside a 16 GiB device", () => {
  const bs = [bucket(0, 100 * 2 ** 20), bucket(10, 1.5 * GiB), bucket(20, 3 * GiB)];
  const ymax = hostScale(bs);
  assert.equal(ymax, 3 * GiB);
  const pts = hostPath(bs, (t) => t, 100, HOST_H, ymax);
  assert.equal(pts.length, 6);
  const ys = pts.map((p) => p[1]);
  // The top of the growth reaches the lane's top area, the start sits near its bottom.
  assert.ok(Math.min(...ys) <= 100 + 14 + 0.001, `top ${Math.min(...ys)}`);
  assert.ok(ys[0] > 100 + HOST_H - 5, `start ${ys[0]}`);
});

test("buckets without a sample are skipped; no samples, no path", () => {
  const bs = [bucket(0, 0), bucket(10, 5 * 2 ** 20), bucket(20, 0)];
  assert.equal(hostPath(bs, (t) => t, 0, HOST_H, hostScale(bs)).length, 2);
  assert.equal(hostScale([bucket(0, 0)]), 0);
  // A 5 MiB heap is drawn on the lane's smallest scale, low in the lane.
  assert.equal(hostScale(bs), HOST_MIN_SCALE);
  const [[, y]] = hostPath(bs, (t) => t, 0, HOST_H, hostScale(bs));
  assert.ok(y > HOST_H * 0.7, `5 MiB drawn at ${y} of ${HOST_H}`);
  assert.deepEqual(hostPath([bucket(0, 0)], (t) => t, 0, HOST_H, 0), []);
});
