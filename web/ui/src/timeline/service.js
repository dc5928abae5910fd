// The findings of a watched service's trace (linger watch): the report's
// service section (timeline/analyze's Service) said as the field report's
// protocol asks: each limit and whether a sample crossed it, the
// goroutines against their baseline, the failures and restarts, and the
// heap in use by site at the first sample, a third of the way and the
// last, side by side, the sites that grew marked.

import { bytes, duration } from "./palette.js";
import { el } from "./dom.js";

/** counterName says a service counter and formats its values: [what, format]. */
export function counterName(name) {
  const [base, pattern] = [name.split(" ")[0], name.split(" ").slice(1).join(" ")];
  const at = pattern ? ` at ${pattern}` : "";
  switch (base) {
    case "go_heap_inuse": return ["heap in use", bytes];
    case "gc_pause_p99_ns": return ["GC pause p99", duration];
    case "goroutines": return ["goroutines", (v) => `${v}`];
    case "alloc_bytes_per_second": return [`allocations${at}`, (v) => `${bytes(v)}/s`];
    case "alloc_objects_per_second": return [`allocations${at}`, (v) => `${v.toLocaleString()} objects/s`];
  }
  return [name, (v) => `${v}`];
}

/** clock is a time in a watch: "12.3 s", "10 min 2 s". */
export function clock(ns) {
  const s = ns / 1e9;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/**
 * distinctNames names rows by short(row), and where two read the same
 * (a service's sites often share their innermost own frame, a handler)
 * adds the innermost frame of the site's stack, what allocated.
 */
export function distinctNames(rows, short, table) {
  const names = rows.map((r) => short(r));
  const seen = new Map();
  names.forEach((n) => seen.set(n, (seen.get(n) || 0) + 1));
  return names.map((n, i) => {
    if (seen.get(n) < 2) return n;
    const f = table.get(rows[i].site_id)?.frames?.[0];
    return f ? `${n} → ${f.func}` : n;
  });
}

/**
 * renderService adds the service's findings to the list through item
 * (view.js's) and returns the comparison table, or null.
 */
export function renderService(view, r, short, item) {
  const s = r.service;
  item(`service ${s.target}: ${s.samples} samples${s.failed ? `, ${s.failed} failed` : ""}${s.restart_count ? `, restarted ${s.restart_count} time${s.restart_count > 1 ? "s" : ""}` : ""}`);
  let breached = false;
  for (const t of s.thresholds || []) {
    const [what, fmt] = counterName(t.counter);
    if (!t.samples) {
      item(`limit: ${what} over ${fmt(t.limit)}: not sampled yet`);
    } else if (t.breached) {
      breached = true;
      item(`over a limit: ${what} ${fmt(t.max)} over ${fmt(t.limit)} at ${t.over} of ${t.samples} samples, first at ${clock(t.first_over_ns)}${t.over_now ? ", over now" : ""}`,
        () => view.jump(t.first_over_ns, Math.max(t.max_time_ns, t.first_over_ns)), t.counter);
    } else {
      item(`within its limit: ${what} at most ${fmt(t.max)} (limit ${fmt(t.limit)})`);
    }
  }
  const g = s.goroutines;
  if (g) {
    const pct = `${g.change >= 0 ? "+" : "−"}${Math.abs(100 * g.change).toFixed(1)} %`;
    item(`goroutines: ${g.last} at the last sample, baseline ${g.baseline} (${pct}): ${g.within ? "within" : "NOT within"} ±${g.allowed} (${(g.tolerance_ppm / 1e4).toFixed(1)} %)`,
      () => view.jump(g.last_time_ns, g.last_time_ns));
  }
  for (const x of s.restarts || []) item(`restarted at ${clock(x.time_ns)}: ${x.text}`, () => view.jump(x.time_ns, x.time_ns));
  const fails = s.failures || [];
  for (const x of fails.slice(-3)) item(`sample failed at ${clock(x.time_ns)}: ${x.text}`, () => view.jump(x.time_ns, x.time_ns));
  if (s.failed > 3) item(`… ${s.failed} parts of samples failed in all`);
  if (s.samples >= 2 && !(r.growth || []).length && !breached && (!g || g.within)) item("Nothing grows, no limit is crossed, and the goroutines are back to their baseline.");
  return comparisonTable(r, short);
}

/** comparisonTable is the heap in use by site at the compared samples, or null before any. */
export function comparisonTable(r, short) {
  const c = r.service?.comparison;
  if (!c?.points?.length || !c.rows?.length) return null;
  const table = new Map((r.site_table || []).map((s) => [s.id, s]));
  const names = distinctNames(c.rows, short, table);
  const head = el("tr", {}, el("th", { scope: "col" }, "site"),
    ...c.points.map((p) => el("th", { scope: "col" }, `sample ${p.sample} (${clock(p.time_ns)})`)),
    el("th", { scope: "col" }, "change"));
  const rows = c.rows.map((row, i) => el("tr", { "data-testid": "service-site", ...(row.grew ? { "data-grew": "" } : {}) },
    el("td", { title: row.site }, names[i]),
    ...row.bytes.map((b) => el("td", {}, bytes(b))),
    el("td", {}, `${row.change >= 0 ? "+" : "−"}${bytes(Math.abs(row.change))}${row.grew ? " ▲ grew" : ""}`)));
  const more = c.omitted ? [el("tr", {}, el("td", { colspan: String(c.points.length + 2) }, `… and ${c.omitted} more sites`))] : [];
  return el("table", { class: "lt-sites", "data-testid": "service-comparison" },
    el("caption", {}, "Heap in use by site: the first sample, a third of the way, the last"),
    el("thead", {}, head), el("tbody", {}, ...rows, ...more));
}
