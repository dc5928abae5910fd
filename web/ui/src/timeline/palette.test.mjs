// node --test web/ui/src/timeline/: every pair of colours a person must
// tell apart stays apart under simulated protanopia, deuteranopia and
// tritanopia (Machado, Oliveira and Fernandes 2009, severity 1), measured
// as the CIE76 distance in CIELAB (about 2.3 is just noticeable; the
// areas need more, since they are small and side by side).
import { test } from "node:test";
import assert from "node:assert/strict";
import { CATEGORIES, CATEGORY_COLOURS, TRACKS, LINGERING } from "./palette.js";

const VISION = {
  normal: [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
  protanopia: [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
  deuteranopia: [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.01182, 0.04294, 0.968881]],
  tritanopia: [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.3039]],
};

const linear = (c) => (c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4);
const rgb = (hex) => { const n = parseInt(hex.slice(1), 16); return [n >> 16, (n >> 8) & 255, n & 255].map((v) => linear(v / 255)); };
function lab([r, g, b]) {
  const f = (t) => (t > 216 / 24389 ? Math.cbrt(t) : (24389 / 27 * t + 16) / 116);
  const x = f((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047), y = f(0.2126 * r + 0.7152 * g + 0.0722 * b), z = f((0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883);
  return [116 * y - 16, 500 * (x - y), 200 * (y - z)];
}
const seen = (m, hex) => lab(m.map((row) => Math.min(1, Math.max(0, row[0] * rgb(hex)[0] + row[1] * rgb(hex)[1] + row[2] * rgb(hex)[2]))));
const distance = (a, b) => Math.hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]);

function closest(colours) {
  const out = {};
  for (const [vision, m] of Object.entries(VISION)) {
    let best = [Infinity];
    for (let i = 0; i < colours.length; i++) {
      for (let j = i + 1; j < colours.length; j++) {
        const d = distance(seen(m, colours[i][1]), seen(m, colours[j][1]));
        if (d < best[0]) best = [d, colours[i][0], colours[j][0]];
      }
    }
    out[vision] = best;
  }
  return out;
}

test("the categories' areas and the lingering colour", () => {
  // Lingering objects also carry a hatch, an outline and a badge; their
  // colour must still not pass for a category's.
  const colours = CATEGORIES.slice(1).map((c, i) => [c, CATEGORY_COLOURS[i + 1]]).concat([["lingering", LINGERING]]);
  for (const [vision, [d, a, b]] of Object.entries(closest(colours))) {
    assert.ok(d >= 12, `${vision}: ${a} and ${b} are ${d.toFixed(1)} apart`);
  }
});

test("the memory lines", () => {
  // Dashed differently too, but a person reads the legend by colour first.
  for (const [vision, [d, a, b]] of Object.entries(closest(TRACKS.map((t) => [t.key, t.colour])))) {
    assert.ok(d >= 30, `${vision}: ${a} and ${b} are ${d.toFixed(1)} apart`);
  }
});

test("a red/green pair fails", () => {
  // The check itself can fail: red and green of equal lightness merge for
  // a deuteranope.
  const [d] = closest([["red", "#CC5544"], ["green", "#6E8A2E"]]).deuteranopia;
  assert.ok(d < 12, `red/green ${d.toFixed(1)} apart`);
});

test("every category has a colour", () => {
  CATEGORIES.forEach((c, i) => assert.match(CATEGORY_COLOURS[i] ?? "", /^#[0-9A-F]{6}$/, `category ${c}`));
});

test("sizes: requested first, the allocator's block beside it when it reads differently", async () => {
  const { sizes } = await import("./palette.js");
  assert.equal(sizes(1200, 1536), "1.2 KiB (1.5 KiB allocated)");
  assert.equal(sizes(2 * 1024 * 1024 - 100, 2 * 1024 * 1024), "2.0 MiB");
  assert.equal(sizes(0, 1536), "1.5 KiB"); // a trace without requested sizes
});

test("sizeRange and rate: requested first, the blocks beside them", async () => {
  const { sizeRange, rate } = await import("./palette.js");
  assert.equal(sizeRange(2112, 2112, 2560, 2560), "2.1 KiB (2.5 KiB allocated)");
  assert.equal(sizeRange(2112, 4200, 2560, 4608), "2.1 KiB–4.1 KiB (2.5 KiB–4.5 KiB allocated)");
  assert.equal(sizeRange(0, 0, 2560, 4608), "2.5 KiB–4.5 KiB");
  assert.equal(rate(28800, 36864, "step"), "+28 KiB/step (+36 KiB allocated)");
  assert.equal(rate(0, 36864, "cell"), "+36 KiB/cell");
});

test("perSecond is short, three figures at most", async () => {
  const { perSecond } = await import("./palette.js");
  assert.deepEqual([0.5, 12, 950, 1234, 64000, 1.2e6, 45e6].map(perSecond), ["0.5", "12", "950", "1.2 k", "64 k", "1.2 M", "45 M"]);
});
