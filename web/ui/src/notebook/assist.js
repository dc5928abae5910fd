// What the kernel tells a code cell's editor, as in JupyterLab: Tab
// completes from the kernel's complete_request (a single match at once,
// several in CodeMirror's completion list), Shift+Tab shows the
// inspect_request's signature and doc in a tooltip at the cursor. In a
// line's leading whitespace, or with text selected, Tab and Shift+Tab
// indent and dedent as before.
//
// The Jupyter protocol (5.2 and later) counts cursor_pos, cursor_start
// and cursor_end in Unicode code points; the editor counts UTF-16 units.

import { keymap, showTooltip } from "@codemirror/view";
import { StateField, StateEffect, Prec } from "@codemirror/state";
import { autocompletion, startCompletion, closeCompletion, acceptCompletion, completionStatus } from "@codemirror/autocomplete";

/** codePoints returns the number of code points in s before UTF-16 index i. */
export function codePoints(s, i) {
  let n = 0;
  for (let j = 0; j < i && j < s.length; j++, n++) {
    const c = s.charCodeAt(j);
    if (c >= 0xd800 && c < 0xdc00 && j + 1 < i) {
      const d = s.charCodeAt(j + 1);
      if (d >= 0xdc00 && d < 0xe000) j++;
    }
  }
  return n;
}

/** utf16Index returns the UTF-16 index in s of code point n (s.length past the end). */
export function utf16Index(s, n) {
  let i = 0;
  for (let k = 0; k < n && i < s.length; k++) i += s.codePointAt(i) > 0xffff ? 2 : 1;
  return i;
}

/** commonPrefix is the longest prefix every string of list shares. */
export function commonPrefix(list) {
  if (!list.length) return "";
  let p = list[0];
  for (const s of list) {
    let i = 0;
    while (i < p.length && i < s.length && p[i] === s[i]) i++;
    p = p.slice(0, i);
  }
  return p;
}

/** wantsKernel says whether Tab or Shift+Tab asks the kernel: one cursor, after text on its line. */
export function wantsKernel(state) {
  const sel = state.selection;
  if (sel.ranges.length > 1 || !sel.main.empty) return false;
  const pos = sel.main.head;
  const line = state.doc.lineAt(pos);
  return /\S/.test(line.text.slice(0, pos - line.from));
}

const setInspect = StateEffect.define();

// The inspect tooltip: set by a reply, gone with the next edit, cursor
// move or Escape.
const inspectField = StateField.define({
  create: () => null,
  update(tip, tr) {
    for (const e of tr.effects) if (e.is(setInspect)) return e.value;
    if (tip && (tr.docChanged || tr.selection)) return null;
    return tip;
  },
  provide: (f) => showTooltip.from(f),
});

function inspectTooltip(pos, text) {
  return {
    pos,
    above: false,
    create() {
      const dom = document.createElement("div");
      dom.className = "cm-inspect";
      dom.dataset.testid = "inspect-tooltip";
      dom.setAttribute("role", "tooltip");
      const pre = document.createElement("pre");
      pre.textContent = text;
      dom.append(pre);
      return { dom };
    },
  };
}

/**
 * kernelAssist returns the extensions of a code cell's editor that ask
 * the kernel: kernel.complete(code, cursorPos) and kernel.inspect(code,
 * cursorPos) resolve with the reply's content (cursorPos in code points).
 */
export function kernelAssist(kernel) {
  // The matches of the last Tab, for the completion list it opens.
  let offered = null; // {doc, from, to, options}

  const reply = async (view, ask) => {
    const { state } = view;
    const code = state.doc.toString();
    const pos = state.selection.main.head;
    let r;
    try {
      r = await ask(code, codePoints(code, pos));
    } catch {
      return null; // no kernel: nothing to offer
    }
    // Typed on or moved meanwhile: the reply is of another text.
    if (view.state.doc !== state.doc || view.state.selection.main.head !== pos || r?.status !== "ok") return null;
    return { r, code, pos };
  };

  const complete = async (view) => {
    const got = await reply(view, kernel.complete);
    if (!got) return;
    const { r, code, pos } = got;
    const matches = [...new Set(r.matches || [])];
    if (!matches.length) return;
    const from = r.cursor_start == null ? pos : utf16Index(code, r.cursor_start);
    const to = r.cursor_end == null ? pos : utf16Index(code, r.cursor_end);
    const typed = code.slice(from, to);
    const prefix = commonPrefix(matches);
    if (matches.length === 1 || (prefix.length > typed.length && prefix.startsWith(typed))) {
      // One match, or a longer prefix they share: inserted at once.
      const insert = matches.length === 1 ? matches[0] : prefix;
      view.dispatch({ changes: { from, to, insert }, selection: { anchor: from + insert.length }, userEvent: "input.complete" });
      if (matches.length === 1) return;
    }
    offered = { doc: view.state.doc, from, options: matches.map((label) => ({ label })) };
    startCompletion(view);
  };

  const inspect = async (view) => {
    const got = await reply(view, kernel.inspect);
    if (!got || !got.r.found) return;
    const text = got.r.data?.["text/plain"];
    if (!text) return;
    view.dispatch({ effects: setInspect.of(inspectTooltip(got.pos, text)) });
  };

  // The list shows what the last Tab got; Ctrl-Space asks the kernel itself.
  const source = async (ctx) => {
    if (offered && offered.doc === ctx.state.doc) {
      const o = offered;
      offered = null;
      return { from: o.from, options: o.options, validFor: /^[\w.]*$/ };
    }
    if (!ctx.explicit) return null;
    const code = ctx.state.doc.toString();
    let r;
    try {
      r = await kernel.complete(code, codePoints(code, ctx.pos));
    } catch {
      return null;
    }
    if (r?.status !== "ok" || !r.matches?.length) return null;
    return { from: utf16Index(code, r.cursor_start), options: [...new Set(r.matches)].map((label) => ({ label })), validFor: /^[\w.]*$/ };
  };

  const tab = (view) => {
    if (completionStatus(view.state) === "active") return acceptCompletion(view);
    if (!wantsKernel(view.state)) return false; // indents
    complete(view);
    return true;
  };

  const shiftTab = (view) => {
    if (!wantsKernel(view.state)) return false; // dedents
    inspect(view);
    return true;
  };

  return [
    inspectField,
    autocompletion({ override: [source], activateOnTyping: false, icons: false }),
    // Before the editor's other keys: these win over indenting.
    Prec.high(keymap.of([{ key: "Tab", run: tab, shift: shiftTab }])),
  ];
}

/**
 * closePopups closes the completion list or the inspect tooltip; false
 * when neither was open (Escape then leaves the editor).
 */
export function closePopups(view) {
  if (completionStatus(view.state)) return closeCompletion(view);
  if (view.state.field(inspectField, false)) {
    view.dispatch({ effects: setInspect.of(null) });
    return true;
  }
  return false;
}
