// Rendering of nbformat outputs. Every function builds DOM from an output
// object as nbformat stores it, so the same code renders outputs loaded
// from the file and outputs streaming from the kernel.

import { sanitize } from "./sanitize.js";

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

function renderData(data) {
  if (data["image/png"]) {
    const img = el("img", { class: "output", "data-testid": "output-image", alt: "image output" });
    img.src = "data:image/png;base64," + joined(data["image/png"]).replace(/\s/g, "");
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

/** Builds the element of one output. */
export function renderOutput(o) {
  switch (o.output_type) {
    case "stream":
      return el("pre", { class: `output stream stream-${o.name}`, "data-testid": "output-stream", "data-name": o.name }, fold(stripANSI(joined(o.text))));
    case "error": {
      const tb = stripANSI((o.traceback || []).join("\n"));
      return el(
        "div",
        { class: "output error", "data-testid": "output-error", role: "group", "aria-label": "Error" },
        el("div", { class: "ename" }, el("strong", { "data-testid": "ename" }, o.ename || "Error"), ": ", el("span", { "data-testid": "evalue" }, o.evalue || "")),
        el("pre", { class: "traceback", "data-testid": "traceback" }, tb),
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
