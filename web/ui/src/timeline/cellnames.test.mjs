import { test } from "node:test";
import assert from "node:assert/strict";
import { CellNames } from "./cellnames.js";

// A page with a notebook of three cells (the second is markdown: it still
// counts in the cell's place).
const page = (ids) => ({ querySelectorAll: () => ids.map((id) => ({ dataset: { cellId: id } })) });

test("a cell is named by its count and place, not its id", () => {
  const n = new CellNames(page(["a1", "m2", "c3"]));
  n.learn([{ id: "c3", count: 5, position: 2 }, { id: "a1", count: 0, position: 1 }]);
  assert.equal(n.line("c3", 2), "In [5], cell 3, line 2"); // the page's place wins over the trace's
  assert.equal(n.line("a1", 1), "cell 1, line 1"); // no count (a silent run, an old trace)
  assert.equal(n.cell("c3", 7), "In [7], cell 3"); // a run's own count
  assert.equal(n.short("c3"), "[5]");
  assert.equal(n.line("zz", 4), "cell zz, line 4"); // a cell neither knows
});

test("without a notebook on the page the trace's places name the cells", () => {
  const n = new CellNames(page([]));
  n.learn([{ id: "x", count: 2, position: 4 }]);
  assert.equal(n.stack([{ cell: "x", line: 2, func: "<toplevel>" }, { cell: "y", line: 3, func: "prefill" }]),
    "In [2], cell 4, line 2 → cell y, line 3 (prefill)");
  assert.equal(n.stack([]), "");
});

test("a program's frames (a PyTorch snapshot's user code) are named by file and line, as analyze.CellNames names them", () => {
  const n = new CellNames(page([]));
  assert.equal(n.stack([{ file: "/home/u/train.py", line: 12, func: "step" }, { file: "/home/u/model.py", line: 40, func: "forward" }]),
    "u/train.py:12 (step) → u/model.py:40 (forward)");
  assert.equal(n.frame({ file: "run.py", line: 3, func: "<module>" }), "run.py:3 (<module>)");
});
