// node --test web/ui/src/timeline/: the piecewise time axis (breaks).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Axis, BREAK_PX, idleSpans, findIdle, idleLabel } from "./axis.js";

const near = (a, b, eps, what) => assert.ok(Math.abs(a - b) <= eps, `${what}: ${a} ≠ ${b}`);
const measure = (s) => s.length * 6.5;

// A leak over [1 s, 3 s], 278 s idle, a last cell over [281 s, 282 s].
const idle = [{ t0: 3e9, t1: 281e9 }];

test("without breaks the axis is linear", () => {
  const a = new Axis(1e9, 3e9, 1000);
  near(a.x(1e9), 0, 1e-9, "left");
  near(a.x(2e9), 500, 1e-9, "middle");
  near(a.x(3e9), 1000, 1e-9, "right");
  near(a.t(250), 1.5e9, 1e-3, "inverse");
});

test("a break is BREAK_PX wide and the active time fills the rest", () => {
  const a = new Axis(1e9, 282e9, 1000, idle);
  // 3 s of active time share 1000 − BREAK_PX pixels.
  const k = (1000 - BREAK_PX) / 3e9;
  near(a.x(3e9), 2e9 * k, 1e-6, "break start");
  near(a.x(281e9) - a.x(3e9), BREAK_PX, 1e-6, "break width");
  near(a.x(282e9), 1000, 1e-6, "right edge");
  // The leak's two seconds are two thirds of the width, not 2/281 of it.
  assert.ok(a.x(3e9) - a.x(1e9) > 600, `leak width ${a.x(3e9) - a.x(1e9)}`);
  assert.equal(a.visible().length, 1);
  assert.deepEqual(a.segments().map((s) => [s.t0, s.t1]), [[1e9, 3e9], [281e9, 282e9]]);
});

test("time ↔ x round-trips across breaks", () => {
  const a = new Axis(0.5e9, 282.5e9, 1337, [{ t0: 3e9, t1: 100e9 }, { t0: 101e9, t1: 281e9 }]);
  for (const t of [0.5e9, 1e9, 2.9999e9, 3e9, 50e9, 100e9, 100.5e9, 101e9, 200e9, 281e9, 282e9, 282.5e9]) {
    near(a.t(a.x(t)), t, 1e-3 * Math.max(1, t / 1e9), `t=${t}`);
  }
  for (let x = 0; x <= 1337; x += 7) near(a.x(a.t(x)), x, 1e-6, `x=${x}`);
  // Monotonic.
  let prev = -Infinity;
  for (let x = 0; x <= 1337; x++) { const t = a.t(x); assert.ok(t > prev, `t(${x})`); prev = t; }
});

test("pan and zoom move across a break and keep the time under the pointer", () => {
  const a = new Axis(1e9, 282e9, 1000, idle);
  const [p0, p1] = a.shifted(300);
  const b = new Axis(p0, p1, 1000, idle);
  near(b.x(a.t(300)), 0, 1e-6, "panned left edge");
  near(b.x(a.t(700)), 400, 1e-6, "panned point");
  const at = a.x(2.5e9);
  const [z0, z1] = a.zoomed(0.5, at);
  const z = new Axis(z0, z1, 1000, idle);
  near(z.x(2.5e9), at, 1e-6, "zoom keeps the pointer's time");
  near(z.x(2.6e9) - z.x(2.5e9), 2 * (a.x(2.6e9) - a.x(2.5e9)), 1e-6, "zoom doubles the scale");
  // Zoomed out again it comes back.
  const [u0, u1] = z.zoomed(2, at);
  near(u0, 1e9, 1e3, "t0 back"); near(u1, 282e9, 1e3, "t1 back");
});

test("a view inside a break is drawn linearly", () => {
  const a = new Axis(50e9, 60e9, 1000, idle);
  assert.equal(a.breaks.length, 0);
  near(a.x(55e9), 500, 1e-6, "linear");
});

test("ticks are in the stretches, at their real times, none in a break", () => {
  const a = new Axis(1e9, 282e9, 1000, idle);
  const ticks = a.ticks(measure);
  assert.ok(ticks.length >= 3, ticks.map((k) => k.label).join());
  for (const k of ticks) {
    near(k.x, a.x(k.t), 1e-9, "tick x");
    assert.ok(k.t <= 3e9 || k.t >= 281e9, `tick at ${k.t} inside the break`);
  }
  assert.ok(ticks.some((k) => k.t >= 281e9), "the stretch after the break has ticks");
  assert.ok(ticks.some((k) => k.label.endsWith(" s")), ticks.map((k) => k.label).join());
});

test("idleSpans: first and last busy buckets, long gaps only", () => {
  const b = (t0, t1, events) => ({ t0, t1, events, allocs: events });
  const s = idleSpans([b(0, 1e9, 0), b(1e9, 2e9, 5), b(2e9, 3e9, 3), b(3e9, 250e9, 0), b(250e9, 251e9, 1), b(251e9, 251.5e9, 0), b(251.5e9, 252e9, 2)]);
  assert.equal(s.first, 1e9);
  assert.equal(s.last, 252e9);
  assert.deepEqual(s.gaps.map((g) => [g.t0, g.t1]), [[3e9, 250e9]]);
  assert.equal(idleSpans([b(0, 1, 0)]), null);
});

test("findIdle narrows the edges with finer queries", async () => {
  // Events at 1.2 s … 1.7 s and at 281.3 s; buckets of 1 s, then 1 ms.
  const times = [1.2e9, 1.5e9, 1.7e9, 281.3e9];
  const lod = async (t0, t1, px) => {
    const w = (t1 - t0) / px, out = [];
    for (let i = 0; i < px; i++) {
      const a = t0 + i * w, z = a + w;
      const n = times.filter((t) => t >= a && t < z).length;
      out.push({ t0: a, t1: z, events: n, allocs: n });
    }
    return out;
  };
  const r = await findIdle(lod, 282e9, { px: 282 });
  near(r.first, 1.2e9, 1e6 + 1, "first");
  near(r.last, 281.3e9, 1e6 + 1, "last");
  assert.equal(r.breaks.length, 1);
  assert.ok(r.breaks[0].t0 > 1.7e9 && r.breaks[0].t0 < 1.8e9, `break start ${r.breaks[0].t0}`);
  assert.ok(r.breaks[0].t1 < 281.3e9 && r.breaks[0].t1 > 281.2e9, `break end ${r.breaks[0].t1}`);
});

test("counter samples and scope bounds alone do not make idle time busy", () => {
  const b = (t0, t1, events, allocs) => ({ t0, t1, events, allocs, frees: 0 });
  // The session's begin at 0, a Go heap sample in the idle time.
  const s = idleSpans([b(0, 1e9, 1, 0), b(1e9, 2e9, 50, 20), b(2e9, 100e9, 0, 0), b(100e9, 101e9, 1, 0), b(101e9, 200e9, 0, 0), b(200e9, 201e9, 30, 10)]);
  assert.equal(s.first, 1e9);
  assert.deepEqual(s.gaps.map((g) => [g.t0, g.t1]), [[2e9, 200e9]]);
  // Samples every 0.8 s for 20 s after the run, a bucket of 2 s each:
  // still idle; a cell that moves the Go heap alone (its scope's bounds
  // and four samples in a bucket) is busy.
  const after = [b(0, 1e9, 40, 12)];
  for (let t = 1e9; t < 21e9; t += 2e9) after.push(b(t, t + 2e9, 2 + (t / 1e9) % 2, 0));
  assert.equal(idleSpans(after).last, 1e9, "Fit ends with the run, not its samples");
  after.push(b(21e9, 23e9, 6, 0));
  assert.equal(idleSpans(after).last, 23e9, "a host-only cell is activity");
  // Without an allocation anywhere, every event counts.
  assert.equal(idleSpans([b(0, 1e9, 0, 0), b(1e9, 2e9, 2, 0)]).first, 1e9);
});

test("idleLabel", () => {
  assert.equal(idleLabel(278e9), "— 4 min 38 s idle —");
  assert.equal(idleLabel(2.5e9), "— 2.5 s idle —");
  assert.equal(idleLabel(3 * 3600e9 + 120e9), "— 3 h 2 min idle —");
});

test("EventAxis: x follows the events' index, idle time takes almost none", async () => {
  const { EventAxis } = await import("./axis.js");
  // 20 events over [1 s, 3 s], none for 278 s, 10 over [281 s, 282 s].
  const overview = [];
  for (let i = 0; i < 282; i++) overview.push({ t0: i * 1e9, t1: (i + 1) * 1e9, events: i === 1 || i === 2 ? 10 : i === 281 ? 10 : 0 });
  const a = new EventAxis(1e9, 282e9, 1000, overview);
  near(a.x(1e9), 0, 1e-6, "left");
  near(a.x(282e9), 1000, 1e-6, "right");
  // Two thirds of the events are before the idle time: two thirds of the width.
  assert.ok(a.x(3e9) > 600 && a.x(3e9) < 680, `x(3 s) = ${a.x(3e9)}`);
  assert.ok(a.x(281e9) - a.x(3e9) < 20, `idle width ${a.x(281e9) - a.x(3e9)}`);
  for (let x = 0; x <= 1000; x += 50) near(a.x(a.t(x)), x, 1e-3, `x=${x}`);
  const at = a.x(2e9), [z0, z1] = a.zoomed(0.5, at), z = new EventAxis(z0, z1, 1000, overview);
  near(z.x(2e9), at, 1e-3, "zoom keeps the pointer's time");
  const ticks = a.ticks(measure);
  assert.ok(ticks.length >= 2 && ticks.every((k) => k.label.startsWith("#")), ticks.map((k) => k.label).join());
  assert.ok(a.segments().length >= 4);
});
