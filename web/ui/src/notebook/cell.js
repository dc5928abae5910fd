// One cell of the page: its element, its CodeMirror editor, its outputs
// (kept as nbformat output objects next to their elements), and for
// markdown its rendered view.

import { marked } from "marked";
import { createEditor, setAnnotations } from "./editor.js";
import { renderOutput, appendStream, joined, stripANSI, outputArea } from "./outputs.js";
import { sanitize } from "./sanitize.js";
import { newID } from "./api.js";

// Stream text reaches the screen a few lines per frame, a backlog within
// about PACE_FRAMES frames: a burst of output then moves the cells below
// in small steps rather than one jump (a layout shift's score, and what a
// person notices, grows with the square of its distance).
const PACE_FRAMES = 8, PACE_MIN_LINES = 2;

function button(label, action, title) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.dataset.cellAction = action;
  b.title = title;
  b.setAttribute("aria-label", title);
  return b;
}

export class Cell {
  /**
   * model is the nbformat cell (kept: its metadata and attachments are
   * saved back untouched); nb is the Notebook, which gets the key
   * bindings and the tool buttons' actions.
   */
  constructor(nb, model) {
    this.nb = nb;
    this.model = model;
    this.id = model.id || newID(4);
    this.type = model.cell_type;
    this.outputs = (model.outputs || []).slice();
    this.outputEls = [];
    this.paced = []; // [element, text] of stream text not yet on screen
    this.count = model.execution_count ?? null;
    this.build(joined(model.source));
  }

  build(source) {
    const e = document.createElement("section");
    e.className = `cell cell-${this.type}`;
    e.id = "cell-" + this.id;
    e.dataset.testid = "cell";
    e.dataset.cellId = this.id;
    e.dataset.cellType = this.type;
    // Focused in command mode (by script or a click beside the editor,
    // never by Tab): its keys are the notebook's commands.
    e.tabIndex = -1;
    e.addEventListener("focus", () => this.nb.focused(this, "command"));
    this.el = e;

    this.promptEl = document.createElement("div");
    this.promptEl.className = "prompt";
    if (this.type === "code") this.promptEl.dataset.testid = "prompt";
    const body = document.createElement("div");
    body.className = "cell-body";
    const tools = document.createElement("div");
    tools.className = "cell-tools";
    tools.append(
      button("↑", "up", "Move cell up"),
      button("↓", "down", "Move cell down"),
      button(this.type === "code" ? "M" : "Py", "toggle-type", this.type === "code" ? "Make this a markdown cell" : "Make this a code cell"),
      button("+", "add-below", "Insert a code cell below"),
      button("✕", "delete", "Delete cell"),
    );
    tools.addEventListener("click", (ev) => {
      const a = ev.target.closest("[data-cell-action]")?.dataset.cellAction;
      if (a) this.nb.cellAction(this, a);
    });
    const input = document.createElement("div");
    input.className = "input";
    input.dataset.testid = "source";
    body.append(tools, input);
    this.editor = createEditor(input, {
      doc: source,
      language: this.type === "code" ? "python" : "",
      keys: this.nb.keysFor(this),
      kernel: this.type === "code" ? this.nb.assist : null,
      onChange: () => this.nb.markDirty(),
      onFocus: () => this.nb.focused(this, "edit"),
    });
    if (this.type === "code") {
      this.outputsEl = document.createElement("div");
      this.outputsEl.className = "outputs";
      this.outputsEl.dataset.testid = "outputs";
      this.outputsEl.setAttribute("aria-live", "polite");
      for (const o of this.outputs) this.outputEls.push(this.outputsEl.appendChild(renderOutput(o)));
      body.append(outputArea(this.outputsEl, () => (this.count != null ? `Output of cell [${this.count}]` : `Output of cell ${this.id}`)));
      this.setPrompt();
    } else if (this.type === "markdown") {
      this.mdEl = document.createElement("div");
      this.mdEl.className = "markdown";
      this.mdEl.dataset.testid = "markdown";
      this.mdEl.tabIndex = 0;
      this.mdEl.title = "Double-click or press Enter to edit";
      this.mdEl.addEventListener("dblclick", () => this.edit());
      this.mdEl.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter" && !ev.shiftKey) {
          ev.preventDefault();
          this.edit();
        }
      });
      this.mdEl.addEventListener("focus", () => this.nb.focused(this, "command"));
      body.append(this.mdEl);
      this.render();
    }
    e.append(this.promptEl, body);
  }

  source() {
    return this.editor.state.doc.toString();
  }

  setPrompt(running) {
    if (this.type !== "code") return;
    this.promptEl.textContent = running ? "[*]:" : `[${this.count ?? " "}]:`;
    this.el.classList.toggle("running", !!running);
    this.el.setAttribute("aria-busy", running ? "true" : "false");
  }

  /** Markdown: shows the rendered source and hides the editor. */
  render() {
    if (this.type !== "markdown") return;
    const src = this.source();
    this.mdEl.replaceChildren(sanitize(marked.parse(src || "*Empty markdown cell: double-click to edit.*", { async: false })));
    this.el.classList.remove("editing");
    this.mdEl.hidden = false;
  }

  /** Markdown: shows the editor. */
  edit() {
    if (this.type !== "markdown") return;
    this.el.classList.add("editing");
    this.mdEl.hidden = true;
    this.editor.dispatch({ selection: { anchor: this.editor.state.doc.length } });
    this.editor.focus();
  }

  focus() {
    if (this.type === "markdown" && !this.el.classList.contains("editing")) this.mdEl.focus();
    else this.editor.focus();
  }

  /**
   * Clears the outputs. With hold, the output area keeps its height until
   * releaseOutputs (the run's end): a re-run then does not pull the cells
   * below up and push them down again as its output streams in.
   */
  clearOutputs(hold) {
    if (hold && this.outputsEl?.offsetHeight) this.outputsEl.style.minHeight = `${this.outputsEl.offsetHeight}px`;
    cancelAnimationFrame(this.paceFrame);
    this.paceFrame = 0;
    this.paced = [];
    this.releaseWhenPaced = false;
    this.outputs = [];
    this.outputEls = [];
    this.outputsEl?.replaceChildren();
  }

  releaseOutputs() {
    // Once the paced text is all on screen.
    this.releaseWhenPaced = this.paced.length > 0;
    if (this.outputsEl && !this.releaseWhenPaced) this.outputsEl.style.minHeight = "";
  }

  /** Adds an output, merging consecutive text of one stream as Jupyter does. */
  addOutput(o) {
    const last = this.outputs.length - 1;
    if (o.output_type === "stream" && last >= 0 && this.outputs[last].output_type === "stream" && this.outputs[last].name === o.name) {
      const prev = this.outputs[last];
      prev.text = joined(prev.text) + joined(o.text);
      this.pace(this.outputEls[last], prev, joined(o.text));
      return last;
    }
    this.flushPaced(); // outputs show in their order
    this.outputs.push(o);
    if (o.output_type === "stream") {
      const e = this.outputsEl.appendChild(renderOutput({ ...o, text: "" }));
      this.outputEls.push(e);
      this.pace(e, o, joined(o.text));
    } else this.outputEls.push(this.outputsEl.appendChild(renderOutput(o)));
    return this.outputs.length - 1;
  }

  /** pace shows text, appended to stream output o, in elem: now if it folds (\r, \b), else over the next frames. */
  pace(elem, o, text) {
    if (elem.dataset.raw || /[\r\x08]/.test(text)) {
      this.flushPaced();
      appendStream(elem, o, text);
      return;
    }
    this.paced.push([elem, text]);
    if (!this.paceFrame) this.paceFrame = requestAnimationFrame(() => this.paceStep());
  }

  paceStep() {
    this.paceFrame = 0;
    let lines = 0;
    for (const [, t] of this.paced) for (let i = t.indexOf("\n"); i >= 0; i = t.indexOf("\n", i + 1)) lines++;
    let budget = Math.max(PACE_MIN_LINES, Math.ceil(lines / PACE_FRAMES));
    while (this.paced.length && budget > 0) {
      const q = this.paced[0], t = q[1];
      let end = 0;
      for (; budget > 0; budget--) {
        const j = t.indexOf("\n", end);
        if (j < 0) { end = t.length; break; }
        end = j + 1;
      }
      // Whole lines only, so no terminal escape is cut in two.
      q[0].append(document.createTextNode(stripANSI(t.slice(0, end))));
      if (end >= t.length) this.paced.shift();
      else q[1] = t.slice(end);
    }
    if (this.paced.length) this.paceFrame = requestAnimationFrame(() => this.paceStep());
    else if (this.releaseWhenPaced) this.releaseOutputs();
  }

  /** flushPaced shows at once all stream text still waiting. */
  flushPaced() {
    cancelAnimationFrame(this.paceFrame);
    this.paceFrame = 0;
    for (const [e, t] of this.paced) e.append(document.createTextNode(stripANSI(t)));
    this.paced = [];
    if (this.releaseWhenPaced) this.releaseOutputs();
  }

  /** Replaces output i in place (update_display_data). */
  replaceOutput(i, o) {
    if (i >= this.outputs.length) return;
    this.outputs[i] = o;
    const e = renderOutput(o);
    this.outputEls[i].replaceWith(e);
    this.outputEls[i] = e;
  }

  /** Sets the gutter annotations (a Map from 1-based line to {text, title, lingering}). */
  setLineAnnotations(byLine) {
    this.editor.dispatch({ effects: setAnnotations.of(byLine) });
  }

  /** The cell as nbformat 4.5 stores it. */
  toJSON() {
    const c = { ...this.model, id: this.id, cell_type: this.type, metadata: this.model.metadata || {}, source: this.source() };
    if (this.type === "code") {
      c.outputs = this.outputs;
      c.execution_count = this.count;
    } else {
      delete c.outputs;
      delete c.execution_count;
    }
    return c;
  }
}
