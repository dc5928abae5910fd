// The CodeMirror 6 setup of a cell, and the gutter that shows per-line
// memory annotations (bytes allocated, peak, lingering) set by the timeline
// through Notebook.setLineAnnotations. The gutter lives in this bundle
// because CodeMirror extensions only work with the CodeMirror instance that
// created the editor.

import { EditorView, keymap, lineNumbers, drawSelection, highlightActiveLine, gutter, GutterMarker } from "@codemirror/view";
import { EditorState, StateField, StateEffect, Prec, RangeSet } from "@codemirror/state";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { syntaxHighlighting, defaultHighlightStyle, indentOnInput, bracketMatching, indentUnit } from "@codemirror/language";
import { closeBrackets, closeBracketsKeymap } from "@codemirror/autocomplete";
import { python } from "@codemirror/lang-python";
import { kernelAssist, closePopups } from "./assist.js";

/** Sets the gutter annotations: a Map from 1-based line to {text, title, lingering}. */
export const setAnnotations = StateEffect.define();

class MemMarker extends GutterMarker {
  constructor(a) {
    super();
    this.a = a;
  }
  eq(o) {
    return o.a.text === this.a.text && o.a.lingering === this.a.lingering && o.a.title === this.a.title;
  }
  toDOM() {
    const s = document.createElement("span");
    s.className = this.a.lingering ? "mem-mark lingering" : "mem-mark";
    s.dataset.testid = "mem-annotation";
    s.textContent = this.a.text;
    if (this.a.title) s.title = this.a.title;
    return s;
  }
}

const annotations = StateField.define({
  create: () => RangeSet.empty,
  update(set, tr) {
    for (const e of tr.effects) {
      if (!e.is(setAnnotations)) continue;
      const ranges = [];
      for (const [line, a] of [...e.value].sort((x, y) => x[0] - y[0])) {
        if (line >= 1 && line <= tr.state.doc.lines) ranges.push(new MemMarker(a).range(tr.state.doc.line(line).from));
      }
      return RangeSet.of(ranges);
    }
    return set.map(tr.changes);
  },
});

const memGutter = [
  annotations,
  gutter({ class: "cm-mem-gutter", markers: (v) => v.state.field(annotations) }),
];

/**
 * Creates the editor of a cell in parent. keys are the cell's own bindings
 * (Shift-Enter, Ctrl-Enter, Ctrl-S…), which win over CodeMirror's;
 * onChange is called after every edit. kernel, for a code cell, is what
 * Tab and Shift+Tab ask (see assist.js).
 */
export function createEditor(parent, { doc, language, keys, kernel, onChange, onFocus }) {
  const extensions = [
    // Escape closes a completion list or tooltip before it leaves the editor.
    Prec.highest(keymap.of([{ key: "Escape", run: closePopups }])),
    Prec.highest(keymap.of(keys)),
    // Four spaces, as every example and Python's own style.
    indentUnit.of("    "),
    lineNumbers(),
    memGutter,
    history(),
    drawSelection(),
    highlightActiveLine(),
    indentOnInput(),
    bracketMatching(),
    closeBrackets(),
    syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
    // Tab indents (in a code cell, after text on its line, it completes:
    // assist.js); Escape then Tab leaves the editor (CodeMirror's rule),
    // so the page stays usable from the keyboard.
    keymap.of([...closeBracketsKeymap, ...defaultKeymap, ...historyKeymap, indentWithTab]),
    EditorView.lineWrapping,
    // A click to edit ends tab-focus mode (which command mode turns on):
    // Tab indents again.
    EditorView.domEventHandlers({ mousedown: (_, view) => (view.setTabFocusMode(false), false) }),
    EditorView.updateListener.of((u) => {
      if (u.docChanged) onChange?.();
      if (u.focusChanged && u.view.hasFocus) onFocus?.();
    }),
    EditorView.contentAttributes.of({ "aria-label": "Cell source" }),
  ];
  if (language === "python") extensions.push(python());
  if (kernel) extensions.push(kernelAssist(kernel));
  return new EditorView({ state: EditorState.create({ doc, extensions }), parent });
}
