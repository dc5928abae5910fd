// node --test web/ui/src/timeline/: a byte count is printed in the unit of
// the figure as printed, as Go's units.Format picks it: never "1024".
import { test } from "node:test";
import assert from "node:assert/strict";
import { bytes } from "./palette.js";

test("bytes picks the unit after rounding", () => {
  for (const [n, want] of [
    [0, "0 B"], [1023, "1023 B"], [1023.4, "1023 B"], [1023.7, "1.0 KiB"], [1024, "1.0 KiB"],
    [1536, "1.5 KiB"], [10 * 1024, "10 KiB"], [1048575, "1.0 MiB"], [2 ** 30 - 1, "1.0 GiB"],
    [24 * 2 ** 20, "24 MiB"], [-1023.7, "-1.0 KiB"], [Infinity, "–"],
  ]) assert.equal(bytes(n), want, `bytes(${n})`);
});
