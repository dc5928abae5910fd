// The data side of a wall-clock profile's flame graph (the kernel's
// %%prof and prof(fn), kernel/flame.go): the kernel's compact tree made
// into the one d3-flame-graph draws, the text of a frame, its colour,
// and moving between frames with the keyboard. Nothing here touches the
// DOM, so node --test runs it.

/** The mime type of the kernel's flame tree. */
export const FLAME_MIME = "application/vnd.linger.flamegraph+json";

/**
 * A function's name without its import path but the last element:
 * linger/engine.(*Engine).attention → engine.(*Engine).attention.
 */
export function shortName(fn) {
  if (fn.startsWith("(")) return fn;
  const i = fn.lastIndexOf("/");
  return i >= 0 ? fn.slice(i + 1) : fn;
}

/** Nanoseconds as seconds, to the millisecond: "0.512 s". */
export function seconds(ns) {
  return `${(ns / 1e9).toFixed(3)} s`;
}

/**
 * The tree d3-flame-graph draws, from the kernel's node {n, v, s, f, k, c}
 * (function, total and self nanoseconds, file:line, kind, callees): each
 * node {name (short), full, value (its total: d3-flame-graph takes a
 * node's value as its callees' and its own), self, file, kind, children}.
 * Callees under minShare of the root are left to their caller. Returns
 * null for data that is not a flame tree.
 */
export function toHierarchy(data, minShare = 0) {
  const root = data && data.root;
  if (!root || typeof root.v !== "number") return null;
  const min = root.v * minShare;
  const conv = (n) => ({
    name: shortName(String(n.n)),
    full: String(n.n),
    value: n.v,
    self: n.s || 0,
    file: n.f || "",
    kind: n.k || "go",
    children: (n.c || []).filter((c) => c.v >= min && c.v > 0).map(conv),
  });
  return conv(root);
}

/** What a frame says when hovered or reached by the keyboard. */
export function describe(d, total) {
  const pct = total > 0 ? ((100 * d.value) / total).toFixed(1) : "0.0";
  const where = d.file ? ` at ${d.file}` : "";
  const waiting = d.kind === "wait" ? ", waiting off-CPU" : "";
  return `${d.full}${where}: ${seconds(d.value)}, ${pct}% (self ${seconds(d.self)}${waiting})`;
}

// The fills of each kind, as the kernel's SVG has them.
const COLORS = {
  root: ["#d9d9d9"],
  interp: ["#c9c9c9", "#d3d3d3", "#bdbdbd"],
  engine: ["#f2a65a", "#f5b971", "#ec9346", "#f7c784", "#e98b3c"],
  kernel: ["#e9d66b", "#f0df86", "#e2cc55"],
  wait: ["#8fb8ea", "#a4c6f0", "#7eaae2"],
  go: ["#e8a7a0", "#eebcb6", "#df938b"],
};

/** A frame's fill: its kind's colour, a shade picked by its name. */
export function kindColor(kind, name) {
  const shades = COLORS[kind] || COLORS.go;
  let h = 0x811c9dc5; // FNV-1a, as the kernel picks its shades
  for (const b of new TextEncoder().encode(name)) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return shades[h % shades.length];
}

/**
 * The frame a key moves to from node (a d3 hierarchy node: parent,
 * children): ArrowUp its caller, ArrowDown its largest callee,
 * ArrowLeft and ArrowRight its neighbours; the node itself when there
 * is none that way, null for another key.
 */
export function navigate(node, key) {
  const sibs = node.parent ? node.parent.children : [node];
  const i = sibs.indexOf(node);
  switch (key) {
    case "ArrowUp":
      return node.parent || node;
    case "ArrowDown": {
      const cs = node.children || [];
      return cs.reduce((best, c) => (!best || c.value > best.value ? c : best), null) || node;
    }
    case "ArrowLeft":
      return sibs[i - 1] || node;
    case "ArrowRight":
      return sibs[i + 1] || node;
  }
  return null;
}
