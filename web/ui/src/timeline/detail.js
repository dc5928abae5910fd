// The detail panel: what a person asks of an object first comes first.
// Who holds it, then its size (requested, then the allocator's block),
// how long it lived (and how many steps), the scope it was expected to die
// with by name ("request 3 in In [2], cell 1"), then where it was made: the
// notebook (Starlark) frames, each a link to its cell line, with the
// interpreter's and the engine's Go frames folded behind a disclosure.
// A finding opens its group instead: all its objects, by holder.

import { sizes, duration } from "./palette.js";
import { el } from "./dom.js";

/** frames are a site's notebook frames, outermost first: its call stack, or its cell line alone. */
export function starlarkFrames(site) {
  if (site?.stack?.length) return site.stack;
  return site?.cell ? [{ func: "<toplevel>", cell: site.cell, line: site.line }] : [];
}

/** frameText names a notebook frame as everywhere else: "In [3], cell 4, line 2 (prefill)" (CellNames.frame). */
export function frameText(names, f) {
  return names.frame(f);
}

function cellLink(names, f, attrs = {}, text = frameText(names, f)) {
  // A program's frame (a PyTorch snapshot's) is its file's line: no cell to go to.
  if (!f.cell && f.file) return el("code", { title: `${f.file}:${f.line}`, ...attrs }, text);
  const a = el("a", { href: `#cell-${f.cell}`, class: "lt-link", title: names.title(f.cell), ...attrs }, text);
  a.addEventListener("click", (ev) => { ev.preventDefault(); document.dispatchEvent(new CustomEvent("linger:goto-cell", { detail: { cellId: f.cell, line: f.line } })); });
  return a;
}

/** program reports whether a site is a program's (a PyTorch snapshot's): its stack is the user's own frames, its frames the whole stack. */
function program(site) {
  return !site?.cell && site?.stack?.length > 0 && !site.stack[0].cell;
}

/** goFrames folds a site's Go frames (a program's whole stack) behind a disclosure. */
function goFrames(site) {
  const fs = site?.frames || [];
  if (!fs.length) return null;
  const what = program(site) ? `the whole stack: ${fs.length} frame${fs.length === 1 ? "" : "s"}, libraries' included` : `${fs.length} interpreter and engine frame${fs.length === 1 ? "" : "s"} (Go)`;
  return el("details", { class: "lt-go", "data-testid": "detail-go-frames" },
    el("summary", {}, what),
    el("code", {}, fs.map((f) => `${f.func} ${f.file}:${f.line}`).join("\n")));
}

/** scopeName says a scope as a person does: "request 3 in In [2], cell 1". */
export function scopeName(names, scopes, id) {
  const byID = new Map(scopes.map((s) => [s.id, s]));
  let s = byID.get(id);
  if (!s) return "";
  const name = (s) => (s.kind === "cell" ? names.cell(s.label, s.count) : s.label || s.kind);
  const parts = [name(s)];
  if (s.kind !== "cell") {
    for (let p = byID.get(s.parent); p; p = byID.get(p.parent)) {
      if (p.kind === "cell") { parts.push(name(p)); break; }
    }
  }
  return parts.join(" in ");
}

/** renderDetail fills the panel with o's details; view is the TimelineView. */
export async function renderDetail(view, o) {
  const names = view.names, site = o.site, gen = (view.detailGen = (view.detailGen || 0) + 1);
  // A cell the names do not know yet (run since the findings last
  // loaded): learn it from the report first.
  if (starlarkFrames(site).some((f) => f.cell && !names.cells.has(f.cell))) {
    try { names.learn((await view.source.report()).cells); } catch { /* named by place, or id */ }
    if (gen !== view.detailGen) return; // another object opened meanwhile
  }
  const rows = [];
  const row = (k, v) => rows.push([k, v]);
  const held = el("span", { "data-testid": "detail-held-by" }, view.source.lingering ? (view.source.live ? "asking the kernel…" : "looking it up in the trace…") : (o.lingering ? "not available for this trace" : "not lingering"));
  row("held by", held);
  row("size", el("span", { "data-testid": "detail-size" }, `${sizes(o.requested, o.size)}, ${o.category}`));
  const life = el("span", { "data-testid": "detail-lifetime" }, lifetimeText(o, null));
  row("lifetime", life);
  const scope = el("span", { "data-testid": "detail-scope" }, o.expect && o.expect !== "none" ? `expected to die with its ${o.expect}` : "no scope expected");
  row("scope", scope);
  if (o.lingering) row("status", o.leak ? "lingering, never freed" : "lingering, freed late");
  const frames = starlarkFrames(site);
  if (frames.length) {
    // The line that made it, then the whole notebook stack when a
    // helper made it (outermost first, as a Python traceback).
    const made = frames[frames.length - 1];
    row("made at", cellLink(names, made, { "data-testid": "detail-cell" }, made.cell ? names.line(made.cell, made.line) : names.frame(made)));
    if (frames.length > 1) {
      const ol = el("ol", { class: "lt-stack", "data-testid": "detail-stack" });
      for (const f of frames) ol.append(el("li", {}, cellLink(names, f)));
      row("stack", ol);
    }
  } else row("made at", site ? "outside any cell" : "unknown");
  const go = goFrames(site);
  if (go) row(program(site) ? "whole stack" : frames.length ? "Go frames" : "stack", go);
  const dl = el("dl", {});
  for (const [k, v] of rows) dl.append(el("dt", {}, k), el("dd", {}, v));
  view.detail.replaceChildren(el("h2", { class: "lt-h" }, o.label || "(no label)"), dl);

  // Asked for after the panel is drawn: the steps it lived, its scope's
  // name, who holds it.
  const t1 = o.free_time >= 0 ? o.free_time : view.source.end();
  view.source.scopes(Math.max(0, o.alloc_time - 1), Math.max(t1, o.alloc_time + 1), 20000).then((s) => {
    const scopes = s.scopes || [];
    const steps = scopes.filter((x) => x.kind === "step" && x.begin >= o.alloc_time && x.begin <= t1).length;
    life.textContent = lifetimeText(o, steps);
    // Its scope: the innermost one of the kind it was expected to die
    // with that was open when it was made.
    const open = scopes.filter((x) => x.kind === o.expect && x.begin <= o.alloc_time && (x.end < 0 || x.end >= o.alloc_time));
    const own = open.sort((a, b) => b.begin - a.begin)[0];
    const name = own && scopeName(names, scopes, own.id);
    if (name) scope.textContent = `expected to die with ${name}`;
  }).catch(() => {});
  if (view.source.lingering) {
    try {
      // The cause that holds it, as linger run says it (the server's
      // kernel.GroupHolders), then its own path and how many others the
      // cause holds.
      const hs = await view.source.lingering();
      const h = (hs.holders || []).find((h) => h.addr === o.addr);
      const g = (hs.groups || []).find((g) => g.addrs?.includes(o.addr));
      if (!h || !g) {
        // A saved trace names the holders of what lingered to its end, as
        // the kernel's walk recorded them; one from before holders were
        // kept, or an object freed late, has none.
        held.textContent = !o.lingering ? "not lingering" : view.source.live ? "no reference path found" : o.leak ? "not recorded in this trace" : "freed late; the trace records holders of what lingered to the end";
        return;
      }
      held.textContent = holderGroup(g);
      const others = g.count - 1;
      held.after(el("br"), el("span", { "data-testid": "detail-held-path" }, `${h.path || "no reference path found"}${others ? `; ${others} other${others === 1 ? "" : "s"} share${others === 1 ? "s" : ""} this cause` : ""}`));
    } catch (e) { held.textContent = `unavailable (${e.message})`; }
  }
}

function lifetimeText(o, steps) {
  const stepText = steps == null ? "" : `, ${steps} step${steps === 1 ? "" : "s"}`;
  const span = `${duration(o.alloc_time)} → ${o.free_time >= 0 ? duration(o.free_time) : "now"}`;
  return o.free_time >= 0 ? `lived ${duration(o.lifetime)}${stepText} (${span})` : `alive ${duration(o.lifetime)}${stepText}, never freed (${span})`;
}

// holderGroup says a cause as linger run does: "global stop_state[*]: 24
// objects, 28.1 KiB (36.0 KiB allocated): stop.* (24)".
export function holderGroup(g) {
  const what = (g.what || []).slice(0, 4).map((k) => `${k.name} (${k.count})`);
  if ((g.what || []).length > 4) what.push("…");
  return `${g.path}: ${g.count} objects, ${sizes(g.requested, g.bytes)}${what.length ? `: ${what.join(", ")}` : ""}`;
}

/**
 * renderGroup opens a finding's group in the panel: its objects (those
 * the report lists), grouped by what holds them when the kernel can say.
 */
export async function renderGroup(view, g, title) {
  view.detailGen = (view.detailGen || 0) + 1;
  const objs = g.objects;
  const head = el("h2", { class: "lt-h", "data-testid": "detail-group" }, title);
  const lead = el("p", { "data-testid": "detail-group-count" }, `${g.count} object${g.count === 1 ? "" : "s"}, ${sizes(g.requested, g.bytes)}${objs.length < g.count ? `; the first ${objs.length} listed` : ""}`);
  const body = el("div", {});
  view.detail.replaceChildren(head, lead, body);
  const list = (os) => {
    const ul = el("ul", { class: "lt-group" });
    for (const o of os.slice(0, 50)) {
      const b = el("button", { type: "button", class: "lt-finding", title: o.site || "" }, `${o.label || "(no label)"} ${sizes(o.requested, o.size)} · ${duration(o.alloc_time_ns)}`);
      b.addEventListener("click", () => view.jump(o.alloc_time_ns, o.linger_time_ns || o.free_time_ns || view.source.end(), o));
      ul.append(el("li", {}, b));
    }
    if (os.length > 50) ul.append(el("li", {}, `… and ${os.length - 50} more`));
    return ul;
  };
  let byHolder = null;
  if (view.source.lingering) {
    try {
      const hs = await view.source.lingering();
      byHolder = new Map();
      for (const o of objs) {
        const hg = (hs.groups || []).find((x) => x.addrs?.includes(o.addr));
        const k = hg ? hg.path : "no reference path found";
        if (!byHolder.has(k)) byHolder.set(k, []);
        byHolder.get(k).push(o);
      }
    } catch { byHolder = null; }
  }
  if (!byHolder) { body.replaceChildren(list(objs)); return; }
  body.replaceChildren(...[...byHolder].flatMap(([k, os]) => [el("h3", { class: "lt-h3" }, `held by ${k} (${os.length})`), list(os)]));
}
