// node --test web/ui/src/timeline/: the time axis's ticks.
import { test } from "node:test";
import assert from "node:assert/strict";
import { axisTicks, tickLabel } from "./layout.js";

const measure = (s) => s.length * 6.5; // 11px system-ui, roughly

test("labels are distinct, ordered and fit at every zoom", () => {
  // From a 10 µs window late in a trace (follow-live mode) to minutes.
  for (const [t0, span] of [[1.98e9, 1e4], [1.98e9, 2.5e5], [1.98e9, 3e6], [1.98e9, 7e7], [0, 2e9], [12e9, 8e9], [0, 3e11], [5e5, 1234], [1.980000123e9, 40]]) {
    for (const width of [240, 560, 1400]) {
      const ticks = axisTicks(t0, t0 + span, width, measure);
      const labels = ticks.map((k) => k.label);
      assert.ok(ticks.length >= 2, `${t0}+${span} @${width}px: ${labels}`);
      assert.equal(new Set(labels).size, labels.length, `repeated label at ${t0}+${span} @${width}px: ${labels}`);
      for (let i = 1; i < ticks.length; i++) {
        const px = ((ticks[i].t - ticks[i - 1].t) / span) * width;
        assert.ok(px >= measure(labels[i]) + 12, `labels overlap at ${t0}+${span} @${width}px: ${labels}`);
      }
    }
  }
});

test("the follow-live case of the issue", () => {
  // 0.5 ms of a trace at 1.98 s: the old axis printed "1.98 s" ten times.
  const labels = axisTicks(1.98e9, 1.9805e9, 560, measure).map((k) => k.label);
  assert.deepEqual(labels.slice(0, 2), ["1.9800 s", "1.9801 s"]);
});

test("label precision follows the step", () => {
  assert.equal(tickLabel(1.9802e9, 2e5, 1.98e9), "1.9802 s");
  assert.equal(tickLabel(5e8, 1e8, 5e8), "500 ms");
  assert.equal(tickLabel(2e9, 1e9, 2e9), "2 s");
  assert.equal(tickLabel(1500, 500, 1500), "1.5 µs");
  assert.equal(tickLabel(0, 2e8, 2e9), "0.0 s");
});
