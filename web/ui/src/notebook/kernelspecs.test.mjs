// node --test web/ui/src/: which kernel the notebook page starts, and its notice.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startName, kernelNotice, kernelspecMetadata } from "./kernelspecs.js";

const plain = { name: "linger", display_name: "Linger (Starlark)", language: "starlark" };
const cuda = { name: "linger-cuda", display_name: "Linger (CUDA)", language: "starlark" };

test("startName starts the notebook's spec when offered, else the default", () => {
  assert.equal(startName([plain, cuda], { name: "linger-cuda", display_name: "Linger (CUDA)" }), "linger-cuda");
  assert.equal(startName([plain, cuda], { name: "linger" }), "linger");
  assert.equal(startName([plain], { name: "linger-cuda" }), "linger");
  assert.equal(startName([plain, cuda], { name: "python3" }), "linger");
  assert.equal(startName([plain, cuda], undefined), "linger");
  assert.equal(startName([plain, cuda], {}), "linger");
  assert.equal(startName([], { name: "linger" }), "");
});

test("kernelNotice says when the notebook runs elsewhere than it asks", () => {
  assert.equal(
    kernelNotice([plain], { name: "linger-cuda" }, "linger"),
    'This notebook asks for kernel "linger-cuda", which this server does not offer (build it with make cuda); running on "Linger (Starlark)".',
  );
  assert.equal(
    kernelNotice([plain, cuda], { name: "python3", display_name: "Python 3" }, "linger"),
    'This notebook asks for kernel "python3", which this server does not offer; running on "Linger (Starlark)".',
  );
  assert.equal(
    kernelNotice([plain, cuda], { name: "linger-cuda" }, "linger"),
    'This notebook asks for kernel "linger-cuda", but its session already runs "Linger (Starlark)"; pick the kernel in the toolbar to change it.',
  );
  // Nothing to say: it runs what it asks for, or asks for nothing.
  assert.equal(kernelNotice([plain, cuda], { name: "linger-cuda" }, "linger-cuda"), "");
  assert.equal(kernelNotice([plain, cuda], undefined, "linger"), "");
  assert.equal(kernelNotice([plain, cuda], { display_name: "?" }, "linger"), "");
  // A kernel the page does not list is named as it is.
  assert.equal(
    kernelNotice([], { name: "linger-cuda" }, "linger"),
    'This notebook asks for kernel "linger-cuda", which this server does not offer (build it with make cuda); running on "linger".',
  );
});

test("kernelspecMetadata is JupyterLab's metadata.kernelspec", () => {
  assert.deepEqual(kernelspecMetadata({ ...cuda, extra: 1 }), { name: "linger-cuda", display_name: "Linger (CUDA)", language: "starlark" });
});
