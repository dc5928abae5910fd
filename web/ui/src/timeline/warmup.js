// A live view waits for a cell's events with its code not yet compiled:
// V8 runs a function first in its interpreter and compiles it once it has
// run a while, so the first second of a cell's events (a million a second
// into the pyramid, a frame every 16 ms) was drawn by slow code, and its
// p99 event-to-screen latency was twice the rest's (issue 25). warmUp
// runs the same code, the pyramid's and the drawing's, on a synthetic
// trace while the view has been idle a while, a little each idle moment,
// until the first events come: the first frames of a cell run later are
// then drawn by compiled code. A view whose events come at once is left
// alone: warming it would only delay them. Each synthetic frame is drawn
// and the view's own drawn again in the same task, so none is ever on
// screen.

import { Pyramid } from "./pyramid.js";
import { KIND } from "./wire.gen.js";

// QUIET_MS: how long a view must have had no events before it is warmed;
// then ROUNDS idle moments of CHUNKS thousand synthetic events and one
// frame each (about what the first second of a cell makes compile).
const QUIET_MS = 500, ROUNDS = 40, CHUNKS = 8, EVENTS = 1000;

/** warmUp warms view (a live TimelineView) once it has waited QUIET_MS for events; stopped by the first events or destroy. */
export function warmUp(view) {
  const p = new Pyramid();
  const n = EVENTS;
  const c = { n, first: 1, time: new Float64Array(n), kind: new Uint8Array(n), category: new Uint8Array(n), size: new Float64Array(n), label: new Uint32Array(n), extra: new Float64Array(n) };
  let round = 0, ms = 0;
  // Idle moments only (no timeout): never in the middle of a drag.
  const idle = window.requestIdleCallback ? (f) => requestIdleCallback(f) : (f) => setTimeout(f, 50);
  const quiet = () => view.destroyed || view.source.end() > 0;
  const step = () => {
    if (quiet() || round >= (view.warmRounds ?? ROUNDS)) return; // warmRounds: a test's
    view.warmed = ++round; // rounds run, for tests
    // Allocations and frees of a few categories, a thousand a millisecond.
    for (let k = 0; k < CHUNKS; k++, ms++) {
      for (let i = 0; i < n; i++) {
        c.time[i] = ms * 1e6 + i * 1000;
        c.kind[i] = i % 3 === 2 ? KIND.free : KIND.alloc;
        c.category[i] = 1 + (i % 5);
        c.size[i] = 4096 * (1 + (i % 7));
      }
      c.first = 1 + ms * n;
      p.addColumns(c);
    }
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
