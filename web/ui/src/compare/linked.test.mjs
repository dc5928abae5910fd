// node --test web/ui/src/: how linked compare views follow a move.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LinkedView, runTime, fromRunTime } from "./linked.js";
import { Axis } from "../timeline/axis.js";

const near = (a, b, eps, what) => assert.ok(Math.abs(a - b) <= eps, `${what}: ${a} ≠ ${b}`);

// A view as followMove sees it: its width, axis, idle stretches and mode.
function view(mode, t0, t1, { W = 800, idle = null } = {}) {
  const v = {
    group: { mode }, W, idle, collapsesIdle: mode !== "clock", view: { t0, t1 },
    axis: new Axis(t0, t1, W, mode !== "clock" && idle ? idle.breaks : []),
    t(x) { return this.axis.t(x); },
    setView(a, b) { this.view = { t0: a, t1: b }; this.axis = new Axis(a, b, this.W, this.collapsesIdle && this.idle ? this.idle.breaks : []); },
  };
  return v;
}

// A: a setup at 2 ms, 312 s idle, its cache cell over [312.02 s, 313.56 s].
const idleA = { first: 2e6, last: 313.565e9, breaks: [{ t0: 6e6, t1: 312.02e9 }] };

test("run time leaves idle stretches out, and back", () => {
  const a = view("align", 0, 314e9, { idle: idleA });
  near(runTime(a, 5e6), 5e6, 0, "before the break");
  near(runTime(a, 312.52e9), 312.52e9 - (312.02e9 - 6e6), 1, "after it");
  for (const t of [1e6, 5e6, 312.03e9, 313e9]) near(fromRunTime(a, runTime(a, t)), t, 1, `round trip ${t}`);
  near(runTime(view("clock", 0, 1, { idle: idleA }), 313e9), 313e9, 0, "one clock collapses nothing");
});

test("each run fitted: the other view makes the same move on its own axis", () => {
  const lead = view("fit", 0, 1e9), other = view("fit", 0, 5e8);
  const from = lead.axis;
  lead.setView(2e8, 6e8); // zoomed ×0.4 about 1/3 of the width
  LinkedView.prototype.followMove.call(other, lead, from);
  near(other.view.t0, 1e8, 1, "left edge");
  near(other.view.t1, 3e8, 1, "right edge");
});

test("starts aligned: the same time since each run's start", () => {
  const lead = view("align", 0, 314e9, { idle: idleA });
  const other = view("align", 0, 6e8, { idle: { first: 2e6, last: 570e6, breaks: [] } });
  const from = lead.axis;
  // A shows 100–300 ms of its cache cell's run time: after the setup and the break.
  const at = (ms) => fromRunTime(lead, runTime(lead, 312.02e9) + ms * 1e6);
  lead.setView(at(100), at(300));
  LinkedView.prototype.followMove.call(other, lead, from);
  const since = (v, t) => runTime(v, t) - runTime(v, v.idle.first);
  near(since(other, other.view.t0), since(lead, lead.view.t0), 1, "left edge");
  near(other.view.t1 - other.view.t0, 200e6, 1, "one time scale");
});

test("one clock: the same times", () => {
  const lead = view("clock", 0, 314e9), other = view("clock", 0, 314e9);
  const from = lead.axis;
  lead.setView(1e9, 2e9);
  LinkedView.prototype.followMove.call(other, lead, from);
  assert.deepEqual(other.view, { t0: 1e9, t1: 2e9 });
});
