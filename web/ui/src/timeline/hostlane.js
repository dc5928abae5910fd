// The host lane: the Go heap in use (the kernel's "go_heap_inuse" counter,
// sampled from runtime/metrics) in its own lane under the device chart,
// with its own scale. On the device chart's scale a host leak of a few
// hundred MiB beside 16 GiB of device memory would be a flat line at the
// bottom; here it fills the lane. A trace without the counter (a saved
// trace from a server that did not sample it) shows an empty lane that
// says so.

import { TRACKS, bytes, duration } from "./palette.js";
import { linePath } from "./columns.js";

export const HOST_H = 56;
// The lane's scale never goes below this, so that a small, steady heap's
// noise (a few MiB of a kernel's own work) does not fill the lane and
// read as growth.
export const HOST_MIN_SCALE = 32 * 2 ** 20;
const GO_HEAP = TRACKS.find((t) => t.key === "go_heap");

/** hostScale is the lane's top: the largest Go heap in the columns' go_heap line (columns.js; at least HOST_MIN_SCALE), or 0 when none was sampled. */
export function hostScale(heap) {
  let m = 0;
  for (const v of heap) if (v > m) m = v;
  return m && Math.max(m, HOST_MIN_SCALE);
}

/** hostPath returns the lane's outline as [x, y] points: a step line of each column's maximum (heap, the columns' go_heap line), columns without a sample skipped. */
export function hostPath(heap, top, h, ymax) {
  if (!ymax) return [];
  return linePath(heap.length, (i) => (heap[i] > 0 ? heap[i] : NaN), (v) => top + h - (v / ymax) * (h - 14));
}

/** drawHostLane draws the lane of view (a TimelineView) at view.tracks.host, view.hostH high (its title alone when collapsed). */
export function drawHostLane(view) {
  const { ctx, W } = view, top = view.tracks.host, h = view.hostH ?? HOST_H;
  const heap = view.columns().lines.go_heap;
  const ymax = hostScale(heap);
  view.hostMax = ymax;
  ctx.fillStyle = "#f6f6f6"; ctx.fillRect(0, top, W, h);
  if (view.hostCollapsed) {
    ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    view.laneLabel(`Go heap in use (host): lane collapsed${ymax ? `, up to ${bytes(ymax)} in view` : ""}`, 4, top + 2);
    return;
  }
  const pts = hostPath(heap, top, h, ymax);
  if (pts.length) {
    ctx.beginPath();
    ctx.moveTo(pts[0][0], top + h);
    for (const [px, py] of pts) ctx.lineTo(px, py);
    ctx.lineTo(pts[pts.length - 1][0], top + h);
    ctx.closePath();
    ctx.fillStyle = "rgba(102,102,102,0.18)"; ctx.fill();
    ctx.beginPath();
    pts.forEach(([px, py], i) => (i ? ctx.lineTo(px, py) : ctx.moveTo(px, py)));
    ctx.setLineDash(GO_HEAP.dash); ctx.strokeStyle = GO_HEAP.colour; ctx.lineWidth = 1.5; ctx.stroke();
    ctx.setLineDash([]); ctx.lineWidth = 1;
  }
  ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
  view.laneLabel(ymax ? `Go heap in use (host, scale ${bytes(ymax)})` : "Go heap in use (host): not sampled in this trace", 4, top + 2);
}

/** hostTooltip is the tooltip's HTML for a pointer in the lane, else null. */
export function hostTooltip(view, p) {
  const top = view.tracks.host;
  if (top === undefined || view.hostCollapsed || p.y < top || p.y >= top + (view.hostH ?? HOST_H)) return null;
  // The column under the pointer, as the lane draws it (columns.js).
  const heap = view.columns().lines.go_heap, i = Math.floor(p.x);
  if (!(heap[i] > 0)) return null;
  return `${duration(view.t(i))}<br>Go heap in use ${bytes(heap[i])}`;
}
