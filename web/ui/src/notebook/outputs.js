// Rendering of nbformat outputs. Every function builds DOM from an output
// object as nbformat stores it, so the same code renders outputs loaded
// from the file and outputs streaming from the kernel.

import { sanitize } from "./sanitize.js";
import { FLAME_MIME } from "./flamedata.js";

const ANSI = /\x1b\[[0-9;?]*[ -/]*[@-~]/g;

/** Removes terminal escapes (kernels colour tracebacks with them). */
export function stripANSI(s) {
  return s.replace(ANSI, "");
}

/** Joins an nbformat multiline string (a string or a list of strings). */
export function joined(v) {
  return Array.isArray(v) ? v.join("") : v || "";
}

/**
 * Applies carriage returns and backspaces as a terminal would, so that a
 * text progress bar ("\r 40%") overwrites its line instead of growing.
 */
export function fold(text) {
  // \x08 is backspace (in a regular expression \b is a word boundary).
  if (!/[\r\x08]/.test(text)) return text;
  const lines = text.split("\n").map((line) => {
    let out = "";
    for (const seg of line.split("\r")) {
      if (seg === "") continue;
      out = seg + out.slice(seg.length);
    }
    while (out.includes("\x08")) out = out.replace(/[^\x08]?\x08/, "");
    return out;
  });
  return lines.join("\n");
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

// flameRenderer draws a profile's flame tree (flame.js, which bundles
// d3-flame-graph); the page's entry sets it, so that this module stays
// free of the DOM libraries for node --test.
let flameRenderer = null;

/** Sets the function that draws a FLAME_MIME output (or returns null). */
export function setFlameRenderer(fn) {
  flameRenderer = fn;
}

/**
 * The image of a mime bundle as an <img> shows it, or null without one:
 * an SVG before a PNG, as a base64 data URL, never inlined into the page
 * (an SVG loaded as an image runs no script and follows no link), with
 * the bundle's text/plain as its alt text ("image output" without one).
 */
export function imageOf(data) {
  const alt = stripANSI(joined(data["text/plain"])).trim() || "image output";
  if (data["image/svg+xml"]) {
    let bin = "";
    for (const b of new TextEncoder().encode(joined(data["image/svg+xml"]))) bin += String.fromCharCode(b);
    return { src: "data:image/svg+xml;base64," + btoa(bin), alt };
  }
  if (data["image/png"]) {
    const b64 = joined(data["image/png"]).replace(/\s/g, "");
    if (/^[A-Za-z0-9+/=]*$/.test(b64)) return { src: "data:image/png;base64," + b64, alt };
  }
  return null;
}

function renderData(data) {
  // A profile (%%prof): its graph drawn interactively (before its static
  // SVG, which other frontends show), then its HTML, whose SVG the
  // sanitizer drops, for the download and the table.
  const flame = data[FLAME_MIME] && flameRenderer && flameRenderer(data[FLAME_MIME]);
  if (flame) {
    if (!data["text/html"]) return flame;
    const div = el("div", { class: "output html-output", "data-testid": "output-html" });
    div.append(sanitize(joined(data["text/html"])));
    return el("div", { class: "output profile", "data-testid": "output-profile" }, flame, div);
  }
  const image = imageOf(data);
  if (image) {
    const img = el("img", { class: "output", "data-testid": "output-image", alt: image.alt });
    img.src = image.src;
    return img;
  }
  if (data["text/html"]) {
    const div = el("div", { class: "output html-output", "data-testid": "output-html" });
    div.append(sanitize(joined(data["text/html"])));
    return div;
  }
  if (data["text/markdown"]) {
    return el("pre", { class: "output result", "data-testid": "output-text" }, joined(data["text/markdown"]));
  }
  return el("pre", { class: "output result", "data-testid": "output-text" }, stripANSI(joined(data["text/plain"])));
}

/**
 * An error's traceback as the page shows it: without its last line when
 * that says again what the heading above it says ("NameError: …", as a
 * kernel's traceback ends), so that an error reads once.
 */
export function tracebackText(o) {
  const tb = stripANSI((o.traceback || []).join("\n")).replace(/[\n ]+$/, "");
  const head = `${o.ename || "Error"}: ${o.evalue || ""}`;
  if (tb === head) return "";
  if (tb.endsWith("\n" + head)) return tb.slice(0, -head.length - 1);
  return tb;
}

/** Builds the element of one output. */
export function renderOutput(o) {
  switch (o.output_type) {
    case "stream":
      return el("pre", { class: `output stream stream-${o.name}`, "data-testid": "output-stream", "data-name": o.name }, fold(stripANSI(joined(o.text))));
    case "error": {
      const tb = tracebackText(o);
      return el(
        "div",
        { class: "output error", "data-testid": "output-error", role: "group", "aria-label": "Error" },
        el("div", { class: "ename" }, el("strong", { "data-testid": "ename" }, o.ename || "Error"), ": ", el("span", { "data-testid": "evalue" }, o.evalue || "")),
        ...(tb ? [el("pre", { class: "traceback", "data-testid": "traceback" }, tb)] : []),
      );
    }
    default:
      return renderData(o.data || {});
  }
}

/**
 * Appends stream text to the stream element el, whose output is o (already
 * extended by text). Plain text is appended as a text node, so nothing above
 * moves and the selection survives; text with carriage returns is re-folded.
 */
export function appendStream(elem, o, text) {
  const t = stripANSI(text);
  if (elem.dataset.raw || /[\r\x08]/.test(t)) {
    elem.dataset.raw = "1";
    elem.textContent = fold(stripANSI(joined(o.text)));
  } else {
    elem.append(document.createTextNode(t));
  }
}

let areaSeq = 0;

/**
 * Wraps a cell's outputs element in an output area as JupyterLab has one:
 * a gutter button on its left collapses and expands the outputs (a click,
 * or Enter or Space when focused), and outputs taller than the CSS max
 * height of .outputs scroll inside it; a scrolling area is a named region
 * in the tab order, so the keyboard scrolls it too, named by name() (one
 * name per cell: axe wants regions told apart). Returns the area.
 */
export function outputArea(outputsEl, name = () => "Output") {
  if (!outputsEl.id) outputsEl.id = `outputs-${++areaSeq}`;
  const toggle = el("button", { type: "button", class: "output-toggle", "data-testid": "output-toggle", "aria-controls": outputsEl.id, "aria-expanded": "true", "aria-label": "Collapse output", title: "Collapse output" });
  const note = el("button", { type: "button", class: "output-collapsed", "data-testid": "output-collapsed", hidden: "" }, "… output collapsed: show it");
  const area = el("div", { class: "output-area", "data-testid": "output-area" }, toggle, el("div", { class: "output-body" }, note, outputsEl));
  const setCollapsed = (collapsed) => {
    area.classList.toggle("collapsed", collapsed);
    outputsEl.hidden = collapsed;
    note.hidden = !collapsed;
    toggle.setAttribute("aria-expanded", String(!collapsed));
    const label = collapsed ? "Expand output" : "Collapse output";
    toggle.setAttribute("aria-label", label);
    toggle.title = label;
  };
  toggle.addEventListener("click", () => setCollapsed(!area.classList.contains("collapsed")));
  note.addEventListener("click", () => {
    setCollapsed(false);
    toggle.focus();
  });
  // Whether the outputs scroll, and whether there are any, after each change.
  let queued = false;
  const fit = () => {
    queued = false;
    const empty = outputsEl.childElementCount === 0;
    area.classList.toggle("empty", empty);
    if (empty && area.classList.contains("collapsed")) setCollapsed(false);
    const scrolls = !outputsEl.hidden && outputsEl.scrollHeight > outputsEl.clientHeight + 1;
    outputsEl.classList.toggle("scrolled", scrolls);
    if (scrolls) {
      outputsEl.tabIndex = 0;
      outputsEl.setAttribute("role", "region");
      outputsEl.setAttribute("aria-label", `${name()} (scrolls)`);
    } else {
      outputsEl.removeAttribute("tabindex");
      outputsEl.removeAttribute("role");
      outputsEl.removeAttribute("aria-label");
    }
  };
  const queue = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(fit);
  };
  new MutationObserver(queue).observe(outputsEl, { childList: true, subtree: true, characterData: true, attributes: true, attributeFilter: ["open", "hidden"] });
  if (typeof ResizeObserver !== "undefined") new ResizeObserver(queue).observe(outputsEl);
  fit();
  return area;
}

/** Converts a kernel iopub message into an nbformat output, or null. */
export function toOutput(type, c, count) {
  switch (type) {
    case "stream":
      return { output_type: "stream", name: c.name, text: c.text };
    case "execute_result":
      return { output_type: "execute_result", data: c.data || {}, metadata: c.metadata || {}, execution_count: c.execution_count ?? count ?? null };
    case "display_data":
      return { output_type: "display_data", data: c.data || {}, metadata: c.metadata || {} };
    case "error":
      return { output_type: "error", ename: c.ename, evalue: c.evalue, traceback: c.traceback || [] };
  }
  return null;
}
