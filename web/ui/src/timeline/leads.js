// Where a finding leads when clicked: to what it names, shown. A finding
// that only fitted the view did nothing a person could see when the view
// was already fit (issue 26): a growth leads to its site (the allocations
// by line, its row marked, and its line in the notebook), the Go heap's
// growth to its lane, expanded and framed on the growth, and to the line
// whose host buffers hold it; the tracks' verdict over the whole trace to
// what it rests on.

import { expandHost } from "./legend.js";

/** siteLine is a report's site (by id, from its site_table as a Map) as its innermost notebook line, {cellId, line}; null for a site outside the notebook. */
export function siteLine(table, id) {
  const st = table.get(id)?.stack;
  const f = st?.[st.length - 1];
  return f?.cell ? { cellId: f.cell, line: f.line } : null;
}

/** gotoSite shows the site's line in the notebook, if the page has one (as the detail panel's frame links do). */
export function gotoSite(table, id) {
  const where = siteLine(table, id);
  if (where) document.dispatchEvent(new CustomEvent("linger:goto-cell", { detail: where }));
}

/**
 * toHost leads to a growth of the Go heap: its lane expanded, the view on
 * [t0, t1] (the growth of the first of sites when not given), and the
 * line of the first of sites, a report's host_sites (most bytes first):
 * the line whose host buffers hold the growth.
 */
export function toHost(view, table, sites, t0, t1) {
  expandHost(view);
  const h = sites?.[0];
  if (t0 === undefined && h?.begin_ns > 0) [t0, t1] = [h.begin_ns, h.end_ns];
  if (t0 !== undefined) view.jump(t0, t1);
  else { view.setFollow(false, true); view.fit(); }
  if (h) gotoSite(table, h.site_id);
}

/**
 * toSite leads to a row's site (a growth, a lingering group: {site_id,
 * category}): the whole run, the allocations by line over it with the
 * row's marked, and its line in the notebook.
 */
export function toSite(view, table, row) {
  view.setFollow(false, true);
  view.fit();
  view.allocations.open(undefined, undefined, row?.site_id ? { site_id: row.site_id, category: row.category } : undefined);
  if (row?.site_id) gotoSite(table, row.site_id);
}

/**
 * toTracks leads to what the whole trace's verdict rests on: the Go
 * heap's holders (toHost), the fastest growth's site for allocated, the
 * allocator at the end (its cached or outside segments) for reserved and
 * device used.
 */
export function toTracks(view, table, r) {
  const t = r.tracks || {};
  if (t.verdict === "go_heap_grows") return toHost(view, table, t.host_sites);
  if (t.verdict === "allocated_grows" && r.growth?.length) return toSite(view, table, r.growth[0]);
  view.setFollow(false, true);
  view.fit();
  view.segments.open({ at: r.last_seq }, "at the end");
}
