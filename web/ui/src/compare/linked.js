// Timeline views linked for comparing traces: they draw memory and
// objects on one scale, so that a trace that grows stands out beside one
// that stays flat, and a zoom, pan or fit of any view moves them all. How
// their time axes relate is the group's mode:
//
//   - "fit" (the default): each view frames its own run, first event to
//     last, idle stretches collapsed into breaks as the single view does,
//     so that a 0.6 s run beside a session left open for minutes is not a
//     sliver. A move of one is the same move of the others on their own
//     axes: the same zoom about the same share of the width, the same
//     share panned.
//   - "align": time counts from each run's first event, idle stretches
//     left out, on one time scale (the breaks' fixed width aside): the
//     shorter run ends sooner.
//   - "clock": one time axis from each trace's start, nothing collapsed.
//
// Everything else is the timeline's own view, unchanged.

import { TimelineView } from "../timeline/view.js";

export const MODES = ["fit", "align", "clock"];

export class LinkedView extends TimelineView {
  /** peers are all the views of the group, this one included (set by link). */
  get peers() { return this.group?.views || [this]; }

  setView(t0, t1, userAction) {
    const from = this.axis;
    super.setView(t0, t1, userAction);
    const g = this.group;
    // A view's own framing (its fit, its first data) moves only itself;
    // a person's move, or a jump to an object, moves the group.
    if (!g || g.syncing || !(userAction || this.jumping)) return;
    g.syncing = true;
    g.gen++;
    try {
      for (const v of g.views) if (v !== this) v.followMove(this, from);
    } finally { g.syncing = false; }
  }

  /** followMove moves this view as leader just moved from the axis from (its axis before the move). */
  followMove(leader, from) {
    const { t0, t1 } = leader.view;
    switch (this.group.mode) {
      case "clock":
        this.setView(t0, t1, true);
        return;
      case "align": {
        const a = (t) => runTime(leader, t) - runTime(leader, runStart(leader));
        const o = runTime(this, runStart(this));
        this.setView(fromRunTime(this, o + a(t0)), fromRunTime(this, o + a(t1)), true);
        return;
      }
      default: {
        // The leader's new edges on its old axis, as shares of its width,
        // are this view's new edges on its own.
        const r = this.W / (leader.W || 1);
        this.setView(this.t(from.x(t0) * r), this.t(from.x(t1) * r), true);
      }
    }
  }

  // Home and End, each run framed by its own: every view goes to its own
  // run's start or end (the other modes' moves already take the others
  // there).
  toStart() { this.eachOwn(TimelineView.prototype.toStart); }
  toEnd() { this.eachOwn(TimelineView.prototype.toEnd); }

  eachOwn(move) {
    const g = this.group;
    if (!g || g.mode !== "fit" || g.syncing) { move.call(this); return; }
    g.syncing = true;
    g.gen++;
    try { for (const v of g.views) move.call(v); } finally { g.syncing = false; }
  }

  jump(t0, t1, finding) {
    this.jumping = true;
    try { super.jump(t0, t1, finding); } finally { this.jumping = false; }
  }

  // Idle stretches are breaks unless the views share one clock (each
  // trace's would be elsewhere).
  get collapsesIdle() { return this.group?.mode !== "clock" && super.collapsesIdle; }

  /** fit frames the group as its mode says, then again once each view knows where its events are. */
  fit() {
    const g = this.group;
    if (!g) { super.fit(); return; }
    const gen = ++g.gen;
    frame(g);
    Promise.all(g.views.map((v) => v.updateIdle())).then((changed) => {
      if (changed.some(Boolean) && g.gen === gen) frame(g);
    });
  }

  memScale() { return Math.max(...this.peers.map((v) => TimelineView.prototype.memScale.call(v))); }

  // The object track's height in bytes, shared the same way. The base
  // class assigns it; reads see the largest of the group.
  set objHeight(h) { this.ownObjHeight = h; }
  get objHeight() { return Math.max(...this.peers.map((v) => v.ownObjHeight || 1)); }

  /** schedule draws the peers too: new data in one view may change the shared scale. */
  schedule() {
    if (this.raf) return;
    super.schedule();
    for (const v of this.peers) if (v !== this) v.schedule();
  }
}

/** link makes the views one group in mode (MODES; the first if unknown). */
export function link(views, mode) {
  const group = { views, mode: MODES.includes(mode) ? mode : MODES[0], syncing: false, gen: 0 };
  for (const v of views) v.group = group;
  return group;
}

/** setMode relates the group's axes another way and fits them so. */
export function setMode(group, mode) {
  if (!MODES.includes(mode) || mode === group.mode) return;
  group.mode = mode;
  for (const v of group.views) v.setAxis();
  group.views[0]?.fit();
}

// frame sets each view of the group to its fitted range, as the mode says.
function frame(g) {
  const vs = g.views;
  switch (g.mode) {
    case "clock": {
      const end = Math.max(...vs.map((v) => v.source.end()));
      for (const v of vs) v.setView(0, Math.max(end * 1.02, 1e6), false);
      return;
    }
    case "align": {
      // The longest run, in time outside idle stretches, from each one's start.
      const span = Math.max(...vs.map((v) => runTime(v, runEnd(v)) - runTime(v, runStart(v))), 1e5);
      const m = Math.max(span * 0.02, 2e4);
      for (const v of vs) {
        const o = runTime(v, runStart(v));
        v.setView(fromRunTime(v, o - m), fromRunTime(v, o + span + m), false);
      }
      return;
    }
    default:
      for (const v of vs) v.fitNow();
  }
}

// A run is where a view's events are (its idle search's first and last),
// else its whole trace; its run time at t, the time before t outside its
// idle stretches (the breaks its axis collapses).
const runStart = (v) => v.idle?.first ?? 0;
const runEnd = (v) => v.idle?.last ?? v.source.end();
const breaksOf = (v) => (v.collapsesIdle && v.idle ? v.idle.breaks : []);

/** runTime is the time before t outside v's idle stretches. */
export function runTime(v, t) {
  let a = t;
  for (const b of breaksOf(v)) {
    if (t <= b.t0) break;
    a -= Math.min(t, b.t1) - b.t0;
  }
  return a;
}

/** fromRunTime is the time whose runTime is a (runTime's inverse; a break's start for the time inside it). */
export function fromRunTime(v, a) {
  let t = a;
  for (const b of breaksOf(v)) {
    if (t <= b.t0) break;
    t += b.t1 - b.t0;
  }
  return t;
}
