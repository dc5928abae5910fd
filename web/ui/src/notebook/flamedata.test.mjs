// node --test web/ui/src/: the data side of a profile's flame graph.
import { test } from "node:test";
import assert from "node:assert/strict";
import { toHierarchy, describe, kindColor, navigate, shortName, seconds } from "./flamedata.js";

// A flame tree as kernel/flame.go writes it: a prefill's matmul computing
// in a worker and waiting in the cell's goroutine.
const data = {
  version: 1,
  unit: "ns",
  wall_ns: 1.2e9,
  samples: 120,
  off_cpu_ns: 5e8,
  root: {
    n: "In [2]",
    v: 2e9,
    k: "root",
    c: [
      {
        n: "(interpreter frames folded)",
        v: 1.2e9,
        s: 1e7,
        k: "interp",
        c: [
          {
            n: "linger/engine.matmulT",
            v: 1.19e9,
            s: 1e6,
            f: "engine/kernel.go:39",
            k: "engine",
            c: [
              { n: "sync.(*WaitGroup).Wait", v: 5e8, s: 5e8, f: "sync/waitgroup.go:118", k: "wait" },
              { n: "linger/engine.dot", v: 1e5, s: 1e5, k: "engine" },
            ],
          },
        ],
      },
      { n: "linger/engine.matmulT.func1", v: 8e8, s: 8e8, f: "engine/kernel.go:35", k: "engine" },
    ],
  },
};

test("toHierarchy makes the kernel's tree d3-flame-graph's", () => {
  const t = toHierarchy(data);
  assert.equal(t.name, "In [2]");
  assert.equal(t.value, 2e9);
  assert.deepEqual(t.children.map((c) => c.name), ["(interpreter frames folded)", "engine.matmulT.func1"]);
  const mt = t.children[0].children[0];
  assert.deepEqual(
    { name: mt.name, full: mt.full, value: mt.value, self: mt.self, file: mt.file, kind: mt.kind },
    { name: "engine.matmulT", full: "linger/engine.matmulT", value: 1.19e9, self: 1e6, file: "engine/kernel.go:39", kind: "engine" },
  );
  assert.equal(mt.children[0].kind, "wait");
  assert.deepEqual(t.children[1].children, []);
});

test("toHierarchy leaves callees under minShare to their caller", () => {
  const t = toHierarchy(data, 0.001); // 2 ms of 2 s
  const mt = t.children[0].children[0];
  assert.deepEqual(mt.children.map((c) => c.name), ["sync.(*WaitGroup).Wait"]);
  assert.equal(mt.value, 1.19e9, "a caller keeps its total");
});

test("toHierarchy refuses what is not a flame tree", () => {
  assert.equal(toHierarchy(null), null);
  assert.equal(toHierarchy({}), null);
  assert.equal(toHierarchy({ root: { n: "x" } }), null);
});

test("describe says a frame's place, time and share", () => {
  const t = toHierarchy(data);
  const wait = t.children[0].children[0].children[0];
  assert.equal(describe(wait, t.value), "sync.(*WaitGroup).Wait at sync/waitgroup.go:118: 0.500 s, 25.0% (self 0.500 s, waiting off-CPU)");
  assert.equal(describe(t, t.value), "In [2]: 2.000 s, 100.0% (self 0.000 s)");
  assert.equal(seconds(1234567), "0.001 s");
});

test("shortName keeps the last path element", () => {
  assert.equal(shortName("linger/engine.(*Engine).attention"), "engine.(*Engine).attention");
  assert.equal(shortName("go.starlark.net/starlark.(*Function).CallInternal"), "starlark.(*Function).CallInternal");
  assert.equal(shortName("(interpreter frames folded)"), "(interpreter frames folded)");
  assert.equal(shortName("runtime.gopark"), "runtime.gopark");
});

test("kindColor picks the kernel's shade for a name", () => {
  // FNV-1a of "linger/engine.matmulT" is 0xbb1a4203, as Go's hash/fnv says
  assert.equal(kindColor("engine", "linger/engine.matmulT"), ["#f2a65a", "#f5b971", "#ec9346", "#f7c784", "#e98b3c"][0xbb1a4203 % 5]);
  assert.equal(kindColor("wait", "x").startsWith("#"), true);
  assert.equal(kindColor("nonsense", "x"), kindColor("go", "x"));
});

test("navigate moves between frames as the arrow keys say", () => {
  // a d3 hierarchy's shape: parent links and children
  const root = { value: 10, children: [] };
  const a = { value: 3, parent: root };
  const b = { value: 7, parent: root, children: [] };
  const b1 = { value: 2, parent: b };
  const b2 = { value: 5, parent: b };
  root.children.push(a, b);
  b.children.push(b1, b2);
  assert.equal(navigate(root, "ArrowDown"), b, "down: the largest callee");
  assert.equal(navigate(b, "ArrowDown"), b2);
  assert.equal(navigate(b2, "ArrowDown"), b2, "a leaf stays");
  assert.equal(navigate(b2, "ArrowUp"), b);
  assert.equal(navigate(root, "ArrowUp"), root);
  assert.equal(navigate(b, "ArrowLeft"), a);
  assert.equal(navigate(a, "ArrowLeft"), a);
  assert.equal(navigate(a, "ArrowRight"), b);
  assert.equal(navigate(root, "ArrowRight"), root);
  assert.equal(navigate(root, "Tab"), null);
});
