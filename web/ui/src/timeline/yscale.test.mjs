// node --test web/ui/src/timeline/: the memory chart's linear and log scales.
import { test } from "node:test";
import assert from "node:assert/strict";
import { yOf, yTicks, logFloor } from "./yscale.js";

test("linear: 0 at the bottom, ymax at the top", () => {
  const y = yOf(100, 170, 1000, false);
  assert.equal(y(0), 270);
  assert.equal(y(1000), 104);
  assert.deepEqual(yTicks(2 ** 30, false).map((k) => k.label), ["0 B", "512 MiB", "1.0 GiB"]);
});

test("log: a 28 → 256 MiB climb under 3 GiB takes a third of the track", () => {
  const ymax = 3 * 2 ** 30, y = yOf(0, 170, ymax, true), lin = yOf(0, 170, ymax, false);
  assert.ok(y(28 * 2 ** 20) - y(256 * 2 ** 20) > 35, `log climb ${y(28 * 2 ** 20) - y(256 * 2 ** 20)}`);
  assert.ok(lin(28 * 2 ** 20) - lin(256 * 2 ** 20) < 15);
  assert.equal(logFloor(ymax), 512 * 1024);
  assert.equal(y(0), y(512 * 1024));
  assert.ok(Math.abs(y(ymax) - 4) < 1e-9);
  assert.deepEqual(yTicks(ymax, true).map((k) => k.label), ["512 KiB", "4.0 MiB", "32 MiB", "256 MiB", "2.0 GiB"]);
});
