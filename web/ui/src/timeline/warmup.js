// A live view waits for a cell's events with its code not yet compiled:
// V8 runs a function first in its interpreter and compiles it once it has
// run a while, so the first second of a cell's events (a million a second
// into the pyramid, a frame every 16 ms) was drawn by slow code, and its
// p99 event-to-screen latency was twice the rest's (issue 25). warmUp runs
// the same code on a synthetic trace, in two parts:
//
//   - at once: a scratch pyramid takes events and answers queries, and
//     the axis, memory chart and host lane of them are drawn on a canvas
//     of their own, never shown (memoryOff); the view's canvas is not
//     touched, whose frames would hold up events that come at once;
//   - once the view has waited QUIET_MS with no events (a notebook open,
//     no cell run yet), a round each idle moment: more events, and a
//     frame of them drawn, then the view's own frame drawn again in the
//     same task, so that none of it is ever on screen.
//
// The first events, or destroy, stop it.

import { Pyramid } from "./pyramid.js";
import { KIND } from "./wire.gen.js";
import { drawHostLane } from "./hostlane.js";

// LOAD_CHUNKS thousand events at once; then, past QUIET_MS, ROUNDS idle
// moments of CHUNKS thousand and a frame each (about what the first second
// of a cell makes compile).
const LOAD_CHUNKS = 60, QUIET_MS = 500, ROUNDS = 40, CHUNKS = 8, EVENTS = 1000;

/** warmUp warms view (a live TimelineView); see the file's comment. */
export function warmUp(view) {
  const n = EVENTS;
  const c = { n, first: 1, time: new Float64Array(n), kind: new Uint8Array(n), category: new Uint8Array(n), size: new Float64Array(n), label: new Uint32Array(n), extra: new Float64Array(n), expect: new Uint8Array(n) };
  // fill adds millisecond ms's thousand synthetic events to p:
  // allocations and frees of a few categories.
  const fill = (p, ms) => {
    for (let i = 0; i < n; i++) {
      c.time[i] = ms * 1e6 + i * 1000;
      c.kind[i] = i % 3 === 2 ? KIND.free : KIND.alloc;
      c.category[i] = 1 + (i % 5);
      c.size[i] = 4096 * (1 + (i % 7));
    }
    c.first = 1 + ms * n;
    p.addColumns(c);
  };
  const W = Math.ceil(view.W || 1000);

  const quiet = () => view.destroyed || view.source.end() > 0;

  // At once, in tasks of a third each (50 to 100 ms, cold), so that
  // neither the page nor a first event waits long.
  const scratch = new Pyramid();
  let loaded = 0, off = null; // off: memoryOff's canvas, let go when done
  const load = () => {
    if (!off && view.ctx && view.tracks) {
      const c = document.createElement("canvas");
      c.width = W; c.height = Math.ceil(view.H || 600);
      off = c.getContext("2d");
    }
    for (const stop = loaded + LOAD_CHUNKS / 3; loaded < stop && !quiet(); loaded++) {
      fill(scratch, loaded);
      const end = (loaded + 1) * 1e6;
      if (loaded % 6 === 5 && off) {
        memoryOff(view, off, scratch, end);
        view.warmedOff = (view.warmedOff || 0) + 1; // for tests
      }
    }
    if (loaded < LOAD_CHUNKS && !quiet()) setTimeout(load, 0);
    else off = null;
  };
  load();

  // Frames, once the view has waited.
  const p = new Pyramid();
  let round = 0, ms = 0;
  // Idle moments only (no timeout): never in the middle of a drag.
  const idle = window.requestIdleCallback ? (f) => requestIdleCallback(f) : (f) => setTimeout(f, 50);
  const step = () => {
    if (quiet() || round >= (view.warmRounds ?? ROUNDS)) return; // warmRounds: a test's
    view.warmed = ++round; // rounds run, for tests
    for (let k = 0; k < CHUNKS; k++, ms++) fill(p, ms);
    // A frame of it at the view's width, then the view's own, in one task;
    // neither counts among the view's frames or first paints.
    const saved = { buckets: view.buckets, view: view.view, frames: view.frames, paint: view.firstPaint, partial: view.firstPartialPaint };
    view.frames = [];
    view.view = { t0: 0, t1: ms * 1e6 * 1.02 };
    view.setAxis();
    view.buckets = p.query(0, view.view.t1, Math.ceil(view.W || 1000));
    view.draw();
    view.buckets = saved.buckets; view.view = saved.view; view.setAxis();
    view.draw();
    view.frames = saved.frames; view.firstPaint = saved.paint; view.firstPartialPaint = saved.partial;
    idle(step);
  };
  setTimeout(() => { if (!quiet()) idle(step); }, QUIET_MS);
}

// memoryOff draws the axis, memory chart, allocation rate and host lane of p (events to
// end) on off, a canvas never shown, with view's own code, and puts the
// view's state back: the chart's loops and paths are a cold frame's most
// time (25 to 35 ms of its first two frames against 3 to 5 ms warm).
function memoryOff(view, off, p, end) {
  const saved = { ctx: view.ctx, buckets: view.buckets, view: view.view, axis: view.axis, cols: view.cols, memMax: view.memMax, yLabels: view.yLabels, memLabel: view.memLabel, ticks: view.ticks, hostMax: view.hostMax, allocsLabel: view.allocsLabel, laneLabels: view.laneLabels };
  view.laneLabels = null; // the titles it writes are not the view's
  try {
    view.ctx = off;
    view.view = { t0: 0, t1: end };
    view.setAxis();
    view.buckets = p.query(0, end, Math.ceil(view.W || 1000));
    view.drawAxis();
    view.drawMemory();
    view.drawAllocs();
    drawHostLane(view);
  } finally {
    Object.assign(view, saved);
  }
}
