// node --test web/ui/src/: Jupyter's code-point offsets, the shared
// prefix of completions, and when Tab asks the kernel.
import { test } from "node:test";
import assert from "node:assert/strict";
import { EditorState, EditorSelection } from "@codemirror/state";
import { codePoints, utf16Index, commonPrefix, wantsKernel } from "./assist.js";

test("cursor offsets convert between UTF-16 units and code points", () => {
  const s = "s = 'é😀' + eng";
  // é is one unit, 😀 two: the end is 15 units, 14 code points.
  assert.equal(s.length, 15);
  assert.equal(codePoints(s, s.length), 14);
  assert.equal(utf16Index(s, 14), 15);
  assert.equal(codePoints(s, 6), 6); // before 😀
  assert.equal(codePoints(s, 8), 7); // after it
  assert.equal(utf16Index(s, 7), 8);
  for (let i = 0; i <= s.length; i++) {
    if (i === 7) continue; // inside the surrogate pair
    assert.equal(utf16Index(s, codePoints(s, i)), i, `round trip at ${i}`);
  }
  assert.equal(utf16Index(s, 99), s.length);
  assert.equal(codePoints("", 0), 0);
});

test("commonPrefix", () => {
  assert.equal(commonPrefix(["alpha", "alphabet"]), "alpha");
  assert.equal(commonPrefix(["mem.stats", "mem.snapshot"]), "mem.s");
  assert.equal(commonPrefix(["a", "b"]), "");
  assert.equal(commonPrefix([]), "");
});

test("Tab asks the kernel after text on the line, with one empty selection", () => {
  const at = (doc, anchor, head = anchor) => EditorState.create({ doc, selection: EditorSelection.single(anchor, head) });
  assert.equal(wantsKernel(at("eng", 3)), true);
  assert.equal(wantsKernel(at("x = 1\n    e.gen", 15)), true);
  assert.equal(wantsKernel(at("x = 1\n    ", 10)), false); // leading whitespace: indent
  assert.equal(wantsKernel(at("", 0)), false);
  assert.equal(wantsKernel(at("engine", 0, 3)), false); // a selection: indent
  const multi = EditorState.create({ doc: "a\nb", selection: EditorSelection.create([EditorSelection.cursor(1), EditorSelection.cursor(3)]), extensions: EditorState.allowMultipleSelections.of(true) });
  assert.equal(wantsKernel(multi), false);
});
