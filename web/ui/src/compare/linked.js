// Timeline views linked for comparing traces: they show the same time
// range (times are from each trace's start) and draw memory and objects on
// one scale, so that a trace that grows stands out beside one that stays
// flat. A zoom, pan or fit of any view moves them all. Everything else is
// the timeline's own view, unchanged.

import { TimelineView } from "../timeline/view.js";

export class LinkedView extends TimelineView {
  /** peers are all the views of the group, this one included (set by link). */
  get peers() { return this.group?.views || [this]; }

  setView(t0, t1, userAction) {
    super.setView(t0, t1, userAction);
    const g = this.group;
    if (!g || g.syncing) return;
    g.syncing = true;
    try {
      for (const v of g.views) if (v !== this) v.setView(this.view.t0, this.view.t1, false);
    } finally { g.syncing = false; }
  }

  // One time axis for both traces: idle stretches are not collapsed (each
  // trace's would be elsewhere).
  get collapsesIdle() { return false; }

  /** fit shows the longest trace whole. */
  fit() {
    const end = Math.max(...this.peers.map((v) => v.source.end()));
    this.setView(0, Math.max(end * 1.02, 1e6), false);
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

/** link makes the views one group and fits them to the longest trace. */
export function link(views) {
  const group = { views, syncing: false };
  for (const v of views) v.group = group;
  return group;
}
