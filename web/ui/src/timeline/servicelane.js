// The service lanes of a watched service's trace (linger watch): its
// goroutines against their baseline, and its GC pauses' p99 against
// their limit, each a step line over the samples with its own scale,
// under the Go heap's lane. They are drawn from the report's service
// series (a point every so many samples, docs/watch.md): a few hundred
// points at most, whatever the trace's length.

import { duration } from "./palette.js";

// Each lane's height; the two lanes are one block of SERVICE_H.
export const LANE_H = 40;
export const SERVICE_H = 2 * LANE_H;

/**
 * laneSeries returns the points [{t, v}] of key in the series (samples
 * without a value skipped) and the lane's top: the largest of the values
 * and the marks (baseline and tolerance, a limit) drawn with them.
 */
export function laneSeries(series, key, marks = []) {
  const pts = [];
  let top = 0;
  for (const p of series || []) {
    const v = p[key];
    if (v === undefined || v === null || v < 0) continue;
    pts.push({ t: p.time_ns, v });
    top = Math.max(top, v);
  }
  for (const m of marks) if (m > 0) top = Math.max(top, m);
  return { pts, top: top > 0 ? top * 1.1 : 1 };
}

/** lanePath is a step line through pts: each value held until the next sample, the last one to end. */
export function lanePath(pts, x, y, end) {
  const out = [];
  pts.forEach((p, i) => {
    const x0 = x(p.t), x1 = x(i + 1 < pts.length ? pts[i + 1].t : Math.max(end, p.t));
    out.push([x0, y(p.v)], [x1, y(p.v)]);
  });
  return out;
}

/** lanes are what the two lanes show of a report's service section: each one's key, title, marks and formatter. */
export function lanes(service) {
  const g = service?.goroutines, gc = (service?.thresholds || []).find((t) => t.counter === "gc_pause_p99_ns");
  return [
    {
      key: "goroutines", fmt: (v) => `${Math.round(v)}`,
      title: g ? `goroutines (baseline ${g.baseline} ±${g.allowed})` : "goroutines",
      band: g ? [g.baseline - g.allowed, g.baseline + g.allowed] : null, line: g?.baseline,
    },
    {
      key: "gc_pause_p99_ns", fmt: (v) => duration(v),
      title: gc ? `GC pause p99 (limit ${duration(gc.limit)})` : "GC pause p99",
      limit: gc?.limit,
    },
  ];
}

/** drawServiceLanes draws the lanes of view (a TimelineView) at view.tracks.service; nothing without a service report. */
export function drawServiceLanes(view) {
  const s = view.report?.service, top0 = view.tracks.service;
  if (!s || top0 === undefined) return;
  const { ctx, W } = view, end = view.source.end();
  lanes(s).forEach((lane, i) => {
    const top = top0 + i * LANE_H, h = LANE_H - 2;
    const { pts, top: ymax } = laneSeries(s.series, lane.key, [lane.band?.[1], lane.limit]);
    const y = (v) => top + h - (v / ymax) * (h - 12);
    ctx.fillStyle = i ? "#f3f3f3" : "#f6f6f6"; ctx.fillRect(0, top, W, h);
    if (lane.band) {
      // The baseline's tolerance: where the count should end.
      ctx.fillStyle = "rgba(17,119,51,0.15)";
      const y0 = y(Math.max(lane.band[0], 0)), y1 = y(lane.band[1]);
      ctx.fillRect(0, y1, W, Math.max(1, y0 - y1));
      ctx.strokeStyle = "#117733"; ctx.setLineDash([4, 3]); ctx.beginPath(); ctx.moveTo(0, Math.round(y(lane.line)) + 0.5); ctx.lineTo(W, Math.round(y(lane.line)) + 0.5); ctx.stroke(); ctx.setLineDash([]);
    }
    if (lane.limit) {
      ctx.strokeStyle = "#CC3311"; ctx.setLineDash([6, 3]); ctx.beginPath(); ctx.moveTo(0, Math.round(y(lane.limit)) + 0.5); ctx.lineTo(W, Math.round(y(lane.limit)) + 0.5); ctx.stroke(); ctx.setLineDash([]);
    }
    const path = lanePath(pts, (t) => view.x(t), y, end);
    if (path.length) {
      ctx.beginPath();
      path.forEach(([px, py], j) => (j ? ctx.lineTo(px, py) : ctx.moveTo(px, py)));
      ctx.strokeStyle = "#333"; ctx.lineWidth = 1.5; ctx.stroke(); ctx.lineWidth = 1;
    }
    const last = pts[pts.length - 1];
    ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    view.laneLabel(`${lane.title}${last ? `: ${lane.fmt(last.v)} at the last sample` : ": not sampled"}`, 4, top + 1);
  });
}

/** serviceTooltip is the tooltip's HTML for a pointer in the lanes, else null. */
export function serviceTooltip(view, p) {
  const s = view.report?.service, top = view.tracks.service;
  if (!s || top === undefined || p.y < top || p.y >= top + SERVICE_H) return null;
  const lane = lanes(s)[Math.floor((p.y - top) / LANE_H)];
  const t = view.t(p.x);
  let at = null;
  for (const q of s.series || []) if (q.time_ns <= t && q[lane.key] >= 0) at = q;
  if (!at) return null;
  return `sample ${at.sample} at ${duration(at.time_ns)}<br>${lane.title}: ${lane.fmt(at[lane.key])}`;
}
