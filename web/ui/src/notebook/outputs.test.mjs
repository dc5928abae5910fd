// node --test web/ui/src/: the DOM-free parts of the output code.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fold, stripANSI, joined, toOutput, tracebackText, imageOf } from "./outputs.js";

test("fold applies carriage returns and backspaces", () => {
  const cases = [
    ["plain\ntext", "plain\ntext"],
    ["10%\r20%\r30%", "30%"],
    ["progress 10%\r55%", "55%gress 10%"],
    ["a\rb\nc\rd", "b\nd"],
    ["abc\b\bX", "aX"],
    ["done\r\n", "done\n"],
  ];
  for (const [in_, want] of cases) assert.equal(fold(in_), want, JSON.stringify(in_));
});

test("stripANSI removes colour escapes", () => {
  assert.equal(stripANSI("\x1b[31mTraceback\x1b[0m (most recent)\x1b[1;32m!"), "Traceback (most recent)!");
});

test("joined accepts both multiline forms", () => {
  assert.equal(joined(["a\n", "b"]), "a\nb");
  assert.equal(joined("a\nb"), "a\nb");
  assert.equal(joined(undefined), "");
});

test("toOutput converts kernel messages to nbformat outputs", () => {
  assert.deepEqual(toOutput("stream", { name: "stdout", text: "hi" }), { output_type: "stream", name: "stdout", text: "hi" });
  assert.deepEqual(toOutput("execute_result", { data: { "text/plain": "2" }, execution_count: 3 }), {
    output_type: "execute_result",
    data: { "text/plain": "2" },
    metadata: {},
    execution_count: 3,
  });
  assert.deepEqual(toOutput("error", { ename: "E", evalue: "v" }), { output_type: "error", ename: "E", evalue: "v", traceback: [] });
  assert.equal(toOutput("status", {}), null);
});

test("tracebackText drops the last line that repeats the heading", () => {
  const e = { ename: "NameError", evalue: "undefined: x" };
  assert.equal(tracebackText({ ...e, traceback: ["Traceback (most recent call last):", "  Cell In [1], line 1, in <toplevel>", "NameError: undefined: x"] }),
    "Traceback (most recent call last):\n  Cell In [1], line 1, in <toplevel>");
  assert.equal(tracebackText({ ...e, traceback: ["\x1b[31mNameError\x1b[0m: undefined: x"] }), "");
  assert.equal(tracebackText({ ...e, traceback: ["Traceback", "  line 1\nNameError: undefined: x\n"] }), "Traceback\n  line 1");
  assert.equal(tracebackText({ ...e, traceback: ["Traceback", "  line 1"] }), "Traceback\n  line 1");
  assert.equal(tracebackText({ ...e }), "");
});

test("imageOf: an SVG as a base64 data URL before a PNG, text/plain its alt", () => {
  const svg = '<svg xmlns="http://www.w3.org/2000/svg"><title>mémoire</title><script>alert(1)</script></svg>';
  const plain = "memory over In [3]: peak 3.1 GiB allocated, 2 lingering objects (228.0 MiB)";
  const img = imageOf({ "image/svg+xml": svg, "image/png": "iVBORw0KGgo=", "text/plain": plain });
  assert.equal(img.alt, plain);
  assert.ok(img.src.startsWith("data:image/svg+xml;base64,"), img.src);
  // The bytes are the SVG's UTF-8, whole: nothing of it is in the page.
  const b64 = img.src.slice("data:image/svg+xml;base64,".length);
  assert.equal(new TextDecoder().decode(Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))), svg);
  assert.deepEqual(imageOf({ "image/png": ["iVBOR", "w0KGgo=\n"] }), { src: "data:image/png;base64,iVBORw0KGgo=", alt: "image output" });
  assert.equal(imageOf({ "image/png": "javascript:alert(1)", "text/plain": "x" }), null);
  assert.equal(imageOf({ "text/plain": "2" }), null);
});
