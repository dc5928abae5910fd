// node --test: the gutter's figures per line, the host buffers' among them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LineStats } from "./lines.js";
import { COUNTER, KIND, SCOPE } from "./wire.gen.js";
import { bytes } from "./palette.js";

const MiB = 2 ** 20;

/** annotations runs events through a LineStats and returns what it sets, by cell and line. */
function annotations(defs, events) {
  const set = new Map();
  globalThis.window = { linger: { notebook: { setLineAnnotations: (cell, m) => set.set(cell, m) } } };
  const ls = new LineStats();
  ls.defs(defs);
  let seq = 0;
  // [seq, time, kind, category, expect, addr, size, requested, scope, site, label, extra]
  for (const [kind, o] of events) ls.add([++seq, seq, kind, 0, o.expect ?? 0, o.addr ?? 0, o.size ?? 0, o.size ?? 0, 0, o.site ?? 0, o.label ?? 0, 0]);
  ls.flush();
  return set;
}

// Scenario 6 in small: documents of doc bytes read at leaky:4 (in parse,
// called from leaky:9) and kept whole by their slices; those read at
// fixed:4 die after each parse.
const doc = 4 * MiB, docs = 5;
const defs = {
  strings: [[1, COUNTER.goHeapSite + "1"], [2, COUNTER.goHeapSite + "2"], [3, COUNTER.goHeap]],
  sites: [
    [1, "leaky", 4, [], [["<toplevel>", "leaky", 9], ["parse_leaky", "leaky", 4]]],
    [2, "fixed", 4, [], [["<toplevel>", "fixed", 9], ["parse_fixed", "fixed", 4]]],
  ],
};

test("a line whose host buffers are alive says so, and its caller by them", () => {
  const evs = [];
  for (let i = 1; i <= docs; i++) {
    evs.push([KIND.counter, { label: 1, size: i * doc }], [KIND.counter, { label: 3, size: 100 * MiB + i * doc }]);
    evs.push([KIND.counter, { label: 2, size: doc }], [KIND.counter, { label: 2, size: 0 }]);
  }
  const set = annotations(defs, evs);
  const leaky = set.get("leaky").get(4), caller = set.get("leaky").get(9);
  assert.equal(leaky.text, `host ${bytes(docs * doc)}`);
  assert.ok(leaky.title.includes(`still alive: ${bytes(docs * doc)}, on the Go heap`), leaky.title);
  assert.match(leaky.title, /copy what you keep/);
  assert.equal(leaky.lingering, false);
  assert.equal(caller.text, leaky.text);
  assert.ok(caller.title.includes(`${bytes(docs * doc)} of it made by functions this line called`), caller.title);
  // The fixed line's documents are gone: at most one alive, none now.
  const fixed = set.get("fixed").get(4);
  assert.equal(fixed.text, `host ↑${bytes(doc)}`);
  assert.match(fixed.title, /none alive now/);
});

test("a line that never held host bytes says nothing; device figures come first when lingering", () => {
  const set = annotations(defs, [
    [KIND.counter, { label: 2, size: 0 }],
    [KIND.scopeBegin, { expect: SCOPE.cell, addr: 7 }],
    [KIND.alloc, { site: 1, addr: 0x10, size: 2 * MiB, expect: SCOPE.cell }],
    [KIND.counter, { label: 1, size: doc }],
    [KIND.scopeEnd, { expect: SCOPE.cell, addr: 7 }],
  ]);
  assert.equal(set.get("fixed").size, 0);
  const leaky = set.get("leaky").get(4);
  assert.equal(leaky.text, `▲ ${bytes(2 * MiB)}`);
  assert.equal(leaky.lingering, true);
  assert.ok(leaky.title.includes(`left lingering ${bytes(2 * MiB)}`) && leaky.title.includes(`; host buffers made here still alive: ${bytes(doc)}`), leaky.title);
});
