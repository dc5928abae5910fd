// The notebook page's controller: loads the notebook, takes over the cells
// the server rendered, runs cells on the kernel, saves, and keeps the kernel
// status and the banner honest. The toolbar's kernel picker starts the
// kernelspec the notebook's metadata asks for when the server offers it
// (else the default, saying so in the kernel notice), and changes the
// session's kernel, recording the choice in metadata.kernelspec.
//
// For the timeline (another bundle) it dispatches on document:
//   linger:kernel  {kernelId, sessionId, path}  when a kernel is connected,
//                  and {…, restarted: true, trace} once it restarted (a new
//                  process, writing the trace named trace)
//   linger:execute {cellId, msgId, phase: "start"|"end", status}
//   linger:renamed {path}  once the notebook was renamed (from its title)
// and listens for linger:goto-cell {cellId}. window.linger.notebook is this
// object (see scrollToCell, setLineAnnotations).
//
// The keyboard is Jupyter's (keys.js lists it): edit mode while a cell's
// editor has the focus, command mode after Esc, where the selected cell
// itself has the focus (marked by the class "command" and the cells'
// data-mode) and single keys act on it. Keys typed in an editor, a field
// or a dialog are never commands.

import { contents, sessions, kernels } from "./api.js";
import { KernelClient } from "./kernel.js";
import { Cell } from "./cell.js";
import { toOutput } from "./outputs.js";
import { startName, kernelNotice, kernelspecMetadata } from "./kernelspecs.js";
import { CommandKeys, SHORTCUTS } from "./keys.js";
import { confirm, shortcuts } from "./dialog.js";
import { Title } from "./title.js";

const AUTOSAVE_MS = 30000;
// In command mode Tab moves through the page: an editor it reaches lets
// it pass (CodeMirror's tab-focus mode, as after Esc) until a key other
// than Tab is pressed in it, or this long.
const TAB_THROUGH_MS = 3600 * 1000;
// How long Restart & Run all waits for the restarted kernel.
const RESTART_WAIT_MS = 60000;

const STATE_TEXT = {
  connecting: "Kernel: connecting",
  starting: "Kernel: starting",
  idle: "Kernel: idle",
  busy: "Kernel: busy",
  restarting: "Kernel: restarting",
  disconnected: "Kernel: disconnected",
  dead: "Kernel: dead",
};

export class Notebook {
  constructor(root) {
    this.root = root;
    this.cellsEl = root.querySelector("[data-testid=cells]");
    this.path = this.cellsEl.dataset.path;
    this.statusEl = root.querySelector("[data-testid=kernel-status]");
    this.saveEl = root.querySelector("[data-testid=save-state]");
    this.banner = root.querySelector("[data-testid=banner]");
    this.picker = root.querySelector("[data-testid=kernel-picker]");
    this.notice = root.querySelector("[data-testid=kernel-notice]");
    this.cells = [];
    this.selected = null; // the active cell
    this.anchor = null; // where Shift-J/K began: the selection is anchor..selected
    // What a code cell's Tab and Shift+Tab ask the kernel (assist.js).
    this.assist = {
      complete: (code, pos) => this.kernelRequest("complete_request", { code, cursor_pos: pos }),
      inspect: (code, pos) => this.kernelRequest("inspect_request", { code, cursor_pos: pos, detail_level: 0 }),
    };
    this.dirty = false;
    this.saving = null;
    this.displays = new Map(); // display_id → [{cell, index}]
    this.kernel = null;
    this.keys = new CommandKeys();
    this.trash = []; // deleted cells, last last: {index, model}
    this.title = new Title(this); // the title renames the notebook
    this.setMode("command");
  }

  async start() {
    this.lockPicker(true);
    this.bindToolbar();
    const model = await contents.get(this.path, "notebook");
    this.model = model.content;
    this.lastModified = model.last_modified;
    this.hydrate(this.model.cells || []);
    setInterval(() => {
      if (this.dirty) this.save();
    }, AUTOSAVE_MS);
    window.addEventListener("beforeunload", (ev) => {
      if (this.dirty) ev.preventDefault();
    });
    document.addEventListener("linger:goto-cell", (ev) => this.scrollToCell(ev.detail?.cellId, ev.detail?.line));
    await this.startSession();
  }

  /** Replaces each server-rendered cell in place with its live cell. */
  hydrate(models) {
    const rendered = new Map([...this.cellsEl.querySelectorAll("[data-testid=cell]")].map((e) => [e.dataset.cellId, e]));
    for (const m of models) {
      const c = new Cell(this, m);
      const old = rendered.get(c.id);
      if (old) {
        old.replaceWith(c.el);
        rendered.delete(c.id);
      } else this.cellsEl.append(c.el);
      this.cells.push(c);
    }
    for (const e of rendered.values()) e.remove();
    if (this.cells.length === 0) this.insertCell(0, "code");
    this.select(this.cells[0]);
  }

  /** The kernelspecs the server offers, its default first: the picker's options. */
  specs() {
    return [...(this.picker?.options || [])].map((o) => ({ name: o.value, display_name: o.textContent, language: o.dataset.language || "" }));
  }

  async startSession() {
    const specs = this.specs();
    const wanted = this.model?.metadata?.kernelspec;
    this.lockPicker(true);
    try {
      const s = await sessions.create(this.path, startName(specs, wanted));
      this.sessionId = s.id;
      this.connect(s.kernel.id);
      this.setKernelName(s.kernel.name);
      this.showNotice(kernelNotice(specs, wanted, s.kernel.name));
    } catch (e) {
      this.setStatus("dead");
      this.showBanner(`Could not start a kernel: ${e.message}`);
    } finally {
      this.lockPicker(false);
    }
  }

  /**
   * Changes the kernel to a new one of the named spec, as JupyterLab's
   * "Change kernel" does: the session's kernel is replaced (the old one
   * shut down, its variables lost), and metadata.kernelspec records the
   * spec for the next save.
   */
  async changeKernel(name) {
    // One change at a time; the last one asked for meanwhile follows (the
    // arrow keys step a focused select through its options, each step a
    // change). The picker stays enabled, keeping the keyboard's focus.
    if (this.changing) {
      this.changeAgain = name;
      return this.changing;
    }
    this.changing = this.replaceKernel(name).finally(() => {
      this.changing = null;
      const next = this.changeAgain;
      this.changeAgain = null;
      if (next && next !== this.kernelName) this.changeKernel(next);
    });
    return this.changing;
  }

  async replaceKernel(name) {
    const spec = this.specs().find((s) => s.name === name);
    if (!spec || (name === this.kernelName && this.kernel)) return;
    const prev = this.kernel;
    // The old kernel goes when the new one is up; its socket closing
    // then is no loss to report.
    prev?.close("the kernel was changed");
    this.kernel = null;
    this.setStatus("starting");
    try {
      let s = null;
      if (this.sessionId) {
        try {
          s = await sessions.changeKernel(this.sessionId, name);
        } catch (e) {
          if (e.status !== 404) throw e;
        }
      }
      // No session (its start failed, or it went with its kernel): a new one.
      s ??= await sessions.create(this.path, name);
      this.sessionId = s.id;
      this.connect(s.kernel.id);
      this.setKernelName(s.kernel.name);
      this.model.metadata = { ...this.model.metadata, kernelspec: kernelspecMetadata(spec) };
      this.markDirty();
      this.showNotice("");
      this.hideBanner();
    } catch (e) {
      const why = `Could not change the kernel to "${spec.display_name}": ${e.message}`;
      this.setKernelName(this.kernelName);
      if (prev) {
        // The old kernel runs on (the server replaces it only with one
        // that started): back to it, saying why in the notice, which its
        // states do not hide as they do the banner.
        this.connect(prev.kernelId);
        const on = this.specs().find((x) => x.name === this.kernelName);
        this.showNotice(`${why}. Still running "${on?.display_name || this.kernelName}".`);
      } else {
        this.setStatus("dead");
        this.showBanner(why, { restart: true });
      }
    }
  }

  /** Shows the spec of the running kernel in the picker (unless another change is asked for already). */
  setKernelName(name) {
    this.kernelName = name;
    if (this.picker && name && !this.changeAgain) this.picker.value = name;
  }

  /** Disables the picker while a kernel starts; with one spec it stays disabled. */
  lockPicker(locked) {
    if (this.picker) this.picker.disabled = locked || this.picker.options.length < 2;
  }

  /** Shows the kernel notice with text, or hides it for "". */
  showNotice(text) {
    if (!this.notice) return;
    this.notice.querySelector("[data-testid=kernel-notice-text]").textContent = text;
    this.notice.hidden = !text;
  }

  connect(kernelId) {
    this.kernel?.close();
    this.kernel = new KernelClient(kernelId, {
      onState: (s, detail) => this.kernelState(s, detail),
      onIOPub: (m) => this.unparented(m),
    });
    this.kernel.connect();
    const tl = this.root.querySelector("[data-testid=timeline]");
    if (tl) tl.dataset.kernelId = kernelId;
    document.dispatchEvent(new CustomEvent("linger:kernel", { detail: { kernelId, sessionId: this.sessionId, path: this.path } }));
  }

  kernelState(s, detail) {
    this.setStatus(s);
    if (s === "dead") this.showBanner(`${detail || "The kernel died."} Its variables are lost; restart it to go on.`, { restart: true });
    else if (s === "disconnected") this.showBanner(detail || "Connection to the kernel lost; reconnecting…", { reconnect: true });
    else if (s !== "connecting") this.hideBanner();
    if (s === "dead" || s === "disconnected") for (const c of this.cells) if (c.el.classList.contains("running")) c.setPrompt(false);
  }

  setStatus(s) {
    this.statusEl.dataset.state = s;
    this.statusEl.querySelector(".label").textContent = STATE_TEXT[s] || `Kernel: ${s}`;
  }

  showBanner(text, { restart = false, reconnect = false } = {}) {
    this.banner.querySelector("[data-testid=banner-text]").textContent = text;
    this.banner.querySelector("[data-testid=banner-restart]").hidden = !restart;
    this.banner.querySelector("[data-testid=banner-reconnect]").hidden = !reconnect;
    this.banner.hidden = false;
  }

  hideBanner() {
    this.banner.hidden = true;
  }

  bindToolbar() {
    this.root.addEventListener("click", (ev) => {
      const a = ev.target.closest("[data-action]")?.dataset.action;
      if (!a) return;
      const act = {
        save: () => this.save(),
        "add-cell": () => this.insertCell(this.index(this.selected) + 1, "code"),
        run: () => this.runAndAdvance(this.selected),
        "run-all": () => this.runAll(),
        interrupt: () => this.interrupt(),
        restart: () => this.confirmRestart(),
        "restart-now": () => this.restart(),
        "restart-run-all": () => this.restartRunAll(),
        "clear-outputs": () => this.clearAllOutputs(),
        shortcuts: () => this.showShortcuts(),
        reconnect: () => this.kernel?.connect(),
        "dismiss-kernel-notice": () => this.showNotice(""),
      }[a];
      act?.();
    });
    this.picker?.addEventListener("change", () => this.changeKernel(this.picker.value));
    document.addEventListener("keydown", (ev) => {
      if ((ev.ctrlKey || ev.metaKey) && ev.key === "s") {
        ev.preventDefault();
        this.save();
      } else this.commandKey(ev);
    });
  }

  /**
   * Runs a command-mode key: one pressed on the selected cell itself or
   * its rendered markdown (or on nothing, the page in command mode).
   * Keys in an editor, a field, a button or a dialog are left alone.
   */
  commandKey(ev) {
    if (ev.defaultPrevented || document.querySelector("dialog[open]")) return;
    const t = ev.target;
    let cell = null;
    if (t === document.body || t === document.documentElement) cell = this.mode === "command" ? this.selected : null;
    else if (t.matches?.("[data-testid=cell], [data-testid=markdown]")) cell = this.cellOf(t);
    if (!cell) return;
    const a = this.keys.action(ev);
    if (!a) return;
    ev.preventDefault();
    this.command(a, cell);
  }

  /** Does command-mode action a (keys.js names them) on cell. */
  command(a, cell) {
    const i = this.index(cell);
    const to = (c) => c && this.commandMode(c);
    const act = {
      edit: () => this.editMode(cell),
      "run-advance": () => this.runAndAdvance(cell, "command"),
      run: () => this.run(cell),
      "run-insert": () => {
        this.run(cell);
        this.insertCell(i + 1, "code");
      },
      "insert-above": () => this.insertCell(i, "code", false),
      "insert-below": () => this.insertCell(i + 1, "code", false),
      delete: () => {
        // Every selected cell, the last first: Z brings them back in order.
        for (const c of this.selectedCells().reverse()) this.deleteCell(c, false);
      },
      "undo-delete": () => this.undoDelete(),
      "to-markdown": () => this.setType(cell, "markdown", false),
      "to-code": () => this.setType(cell, "code", false),
      "select-next": () => to(this.cells[i + 1]),
      "select-prev": () => to(this.cells[i - 1]),
      "extend-next": () => this.extendSelection(cell, 1),
      "extend-prev": () => this.extendSelection(cell, -1),
      merge: () => this.mergeCells(this.selectedCells().length > 1 ? this.selectedCells() : [cell, this.cells[i + 1]]),
      interrupt: () => this.interrupt(),
      restart: () => this.confirmRestart(),
      shortcuts: () => this.showShortcuts(),
    }[a];
    act?.();
  }

  /** Command mode on cell: its editor left (markdown rendered), the cell itself focused and marked; extend keeps the selection's anchor. */
  commandMode(cell = this.selected, extend = false) {
    if (!cell) return;
    if (cell.type === "markdown") cell.render();
    this.select(cell, extend);
    this.setMode("command");
    for (const c of this.cells) c.editor.setTabFocusMode(TAB_THROUGH_MS);
    cell.el.focus({ preventScroll: true });
    cell.el.scrollIntoView({ block: "nearest" });
  }

  /** Edit mode in cell: its editor focused (a markdown cell's source shown). */
  editMode(cell = this.selected) {
    if (!cell) return;
    this.select(cell);
    cell.editor.setTabFocusMode(false);
    if (cell.type === "markdown") cell.edit();
    else cell.editor.focus();
  }

  /** A cell got the focus: its editor (edit mode), or itself or its rendered markdown (command mode). */
  focused(cell, mode) {
    // The active cell taking the focus back (Shift-J/K focus it) keeps
    // the selection; editing ends it.
    if (cell !== this.selected || mode === "edit") this.select(cell);
    this.setMode(mode);
  }

  /** Records the mode ("command" or "edit") where the page shows it. */
  setMode(m) {
    this.mode = m;
    this.cellsEl.dataset.mode = m;
    this.selected?.el.classList.toggle("command", m === "command");
  }

  showShortcuts() {
    return shortcuts(SHORTCUTS);
  }

  /** Restarts the kernel once the user says so, as JupyterLab asks. */
  async confirmRestart() {
    const yes = await confirm({
      title: "Restart kernel?",
      text: "Do you want to restart the kernel? All variables will be lost.",
      accept: "Restart",
      danger: true,
      testid: "restart-dialog",
    });
    if (yes) await this.restart();
    return yes;
  }

  /** Restarts the kernel (asking first) and runs every cell in the new one. */
  async restartRunAll() {
    const yes = await confirm({
      title: "Restart kernel and run all cells?",
      text: "Do you want to restart the kernel and run every cell again? All variables will be lost.",
      accept: "Restart",
      danger: true,
      testid: "restart-dialog",
    });
    if (!yes) return;
    await this.restart();
    const until = Date.now() + RESTART_WAIT_MS;
    while (this.kernel?.state !== "idle") {
      if (Date.now() > until || this.kernel?.state === "dead") return;
      await new Promise((r) => setTimeout(r, 100));
    }
    await this.runAll();
  }

  /** Clears every code cell's outputs and execution count, as Jupyter's "Clear all outputs". */
  clearAllOutputs() {
    for (const c of this.cells) {
      if (c.type !== "code") continue;
      c.clearOutputs(false);
      this.dropDisplays(c);
      c.count = null;
      c.setPrompt(c.el.classList.contains("running"));
    }
    this.markDirty();
  }

  /** The key bindings of a cell's editor. */
  keysFor(cell) {
    return [
      { key: "Shift-Enter", run: () => (this.runAndAdvance(cell), true) },
      { key: "Mod-Enter", run: () => (this.run(cell), true) },
      { key: "Alt-Enter", run: () => (this.run(cell), this.insertCell(this.index(cell) + 1, "code"), true) },
      { key: "Mod-s", run: () => (this.save(), true), preventDefault: true },
      { key: "Mod-Shift--", run: () => (this.splitCell(cell), true), preventDefault: true },
      { key: "Escape", run: () => (this.commandMode(cell), true) },
    ];
  }

  cellOf(elem) {
    const e = elem.closest("[data-testid=cell]");
    return this.cells.find((c) => c.el === e);
  }

  index(cell) {
    return Math.max(0, this.cells.indexOf(cell));
  }

  /** Makes cell the active cell; extend keeps the anchor (Shift-J/K), else the selection is cell alone. */
  select(cell, extend = false) {
    if (!cell) return;
    if (!extend) this.anchor = cell;
    if (this.selected !== cell) {
      this.selected?.el.classList.remove("selected", "command");
      this.selected = cell;
      cell.el.classList.add("selected");
      cell.el.classList.toggle("command", this.mode === "command");
    }
    this.markSelection();
  }

  /** The selected cells in order: from the anchor to the active cell. */
  selectedCells() {
    const a = this.cells.indexOf(this.anchor), b = this.cells.indexOf(this.selected);
    if (b < 0) return [];
    if (a < 0) return [this.selected];
    return this.cells.slice(Math.min(a, b), Math.max(a, b) + 1);
  }

  /** Marks the cells of a selection of several (class "marked"), as JupyterLab tints them. */
  markSelection() {
    const sel = new Set(this.selectedCells());
    const several = sel.size > 1;
    for (const c of this.cells) c.el.classList.toggle("marked", several && sel.has(c));
  }

  /** Shift-J/K: the cell dir (1 below, -1 above) of cell becomes active, the anchor kept. */
  extendSelection(cell, dir) {
    const next = this.cells[this.index(cell) + dir];
    if (next) this.commandMode(next, true);
  }

  /**
   * Merges cells (in order, at least two) into the first, as JupyterLab
   * does: their sources joined by a blank line, the outputs cleared; the
   * merged cell is selected in command mode.
   */
  mergeCells(cells) {
    cells = cells.filter(Boolean);
    if (cells.length < 2) return;
    const [first, ...rest] = cells;
    const src = cells.map((c) => c.source()).join("\n\n");
    first.editor.dispatch({ changes: { from: 0, to: first.editor.state.doc.length, insert: src } });
    if (first.type === "code") {
      first.clearOutputs(false);
      this.dropDisplays(first);
      first.count = null;
      first.setPrompt(false);
    }
    for (const c of rest) {
      this.dropDisplays(c);
      this.cells.splice(this.cells.indexOf(c), 1);
      c.el.remove();
    }
    this.commandMode(first);
    this.markDirty();
  }

  /**
   * Splits cell at its cursor (Ctrl-Shift--), as JupyterLab does: the
   * text before stays, the text after goes to a new cell below with the
   * outputs, each without the blank lines at the cut; the new cell is
   * edited.
   */
  splitCell(cell) {
    const doc = cell.editor.state.doc;
    const at = cell.editor.state.selection.main.head;
    const before = doc.sliceString(0, at).replace(/\n+$/, "");
    const after = doc.sliceString(at).replace(/^\n+/, "");
    const m = cell.toJSON();
    const c = new Cell(this, { cell_type: cell.type, metadata: {}, source: after, outputs: m.outputs || [], execution_count: m.execution_count ?? null });
    cell.editor.dispatch({ changes: { from: 0, to: doc.length, insert: before } });
    if (cell.type === "code") {
      cell.clearOutputs(false);
      this.dropDisplays(cell);
      cell.count = null;
      cell.setPrompt(false);
    }
    this.place(c, this.index(cell) + 1);
    this.editMode(c);
    c.editor.dispatch({ selection: { anchor: 0 } });
    this.markDirty();
  }

  /** Puts cell c at index i. */
  place(c, i) {
    const ref = this.cells[i];
    if (ref) ref.el.before(c.el);
    else this.cellsEl.append(c.el);
    this.cells.splice(i, 0, c);
  }

  /** Inserts a new cell at index i, selected: edited, or in command mode (edit false). */
  insertCell(i, type, edit = true) {
    const c = new Cell(this, { cell_type: type, metadata: {}, source: "", outputs: [], execution_count: null });
    this.place(c, i);
    this.select(c);
    if (edit) c.focus();
    else this.commandMode(c);
    this.markDirty();
    return c;
  }

  /** Deletes cell, kept for undoDelete; the cell now at its place is selected. */
  deleteCell(cell, edit = true) {
    const i = this.cells.indexOf(cell);
    if (i < 0) return;
    this.trash.push({ index: i, model: structuredClone(cell.toJSON()) });
    this.dropDisplays(cell);
    this.cells.splice(i, 1);
    cell.el.remove();
    this.markDirty();
    if (this.cells.length === 0) this.insertCell(0, "code", edit);
    const next = this.cells[Math.min(i, this.cells.length - 1)];
    if (edit) {
      this.select(next);
      next.focus();
    } else this.commandMode(next);
  }

  /** Brings back the last deleted cell at its place, with its source and outputs (Z). */
  undoDelete() {
    const d = this.trash.pop();
    if (!d) return;
    const c = new Cell(this, d.model);
    this.place(c, Math.min(d.index, this.cells.length));
    this.markDirty();
    this.commandMode(c);
  }

  /** Makes cell a cell of type ("code" or "markdown"), its source kept; returns the new cell. */
  setType(cell, type, edit = true) {
    if (cell.type === type) return cell;
    const i = this.index(cell);
    const m = cell.toJSON();
    m.cell_type = type;
    this.dropDisplays(cell);
    const c = new Cell(this, m);
    cell.el.replaceWith(c.el);
    this.cells[i] = c;
    this.select(c);
    if (!edit) this.commandMode(c);
    this.markDirty();
    return c;
  }

  cellAction(cell, a) {
    const i = this.index(cell);
    if (a === "up" && i > 0) {
      this.cells.splice(i, 1);
      this.cells.splice(i - 1, 0, cell);
      this.cells[i].el.before(cell.el);
    } else if (a === "down" && i < this.cells.length - 1) {
      this.cells.splice(i, 1);
      this.cells.splice(i + 1, 0, cell);
      this.cells[i].el.after(cell.el);
    } else if (a === "delete") {
      this.deleteCell(cell);
      return;
    } else if (a === "add-below") {
      this.insertCell(i + 1, "code");
      return;
    } else if (a === "toggle-type") {
      this.setType(cell, cell.type === "code" ? "markdown" : "code");
      return;
    } else return;
    this.markDirty();
  }

  /**
   * Runs cell and selects the next, edited (from edit mode, the toolbar)
   * or in command mode (from command mode); past the last cell a new one
   * is added and edited, as Jupyter does.
   */
  runAndAdvance(cell, from = "edit") {
    if (!cell) return;
    this.run(cell);
    const i = this.index(cell);
    const next = this.cells[i + 1];
    if (!next) this.insertCell(i + 1, "code");
    else if (from === "command") this.commandMode(next);
    else {
      this.select(next);
      next.focus();
    }
  }

  async runAll() {
    for (const c of this.cells.slice()) {
      const r = await this.run(c);
      if (r && r.status !== "ok") break;
    }
  }

  /** Runs a cell; resolves with the execute_reply content (or null). */
  async run(cell) {
    if (!cell) return null;
    if (cell.type === "markdown") {
      cell.render();
      return null;
    }
    if (cell.type !== "code") return null;
    if (!this.kernel || !["idle", "busy", "starting"].includes(this.kernel.state)) {
      this.showBanner("The kernel is not connected; the cell was not run.", { restart: true, reconnect: true });
      return null;
    }
    cell.clearOutputs(true);
    this.dropDisplays(cell);
    cell.setPrompt(true);
    this.markDirty();
    let msgId = "";
    let reply = null;
    try {
      reply = await this.kernel.execute(cell.source(), {
        cellId: cell.id,
        position: this.cells.indexOf(cell) + 1,
        onStart: (id) => {
          msgId = id;
          this.emit("linger:execute", { cellId: cell.id, msgId, phase: "start" });
        },
        onOutput: (m) => this.output(cell, m),
      });
      if (reply.execution_count != null) cell.count = reply.execution_count;
    } catch (e) {
      cell.addOutput({ output_type: "stream", name: "stderr", text: `Not finished: ${e.message}.\n` });
    } finally {
      cell.releaseOutputs();
      cell.setPrompt(false);
      this.emit("linger:execute", { cellId: cell.id, msgId, phase: "end", status: reply?.status || "lost" });
    }
    return reply;
  }

  output(cell, m) {
    const type = m.header.msg_type;
    const c = m.content || {};
    if (type === "execute_input") {
      cell.count = c.execution_count;
      return;
    }
    if (type === "clear_output") {
      // wait=true would clear at the next output; clearing now and keeping
      // the height until the run ends looks the same and shifts nothing.
      cell.clearOutputs(true);
      this.dropDisplays(cell);
      return;
    }
    const o = toOutput(type, c, cell.count);
    if (!o) return;
    const i = cell.addOutput(o);
    const did = c.transient?.display_id;
    if (did) {
      if (!this.displays.has(did)) this.displays.set(did, []);
      this.displays.get(did).push({ cell, index: i });
    }
  }

  /** iopub messages of no execution of this page: display updates. */
  unparented(m) {
    if (m.header.msg_type !== "update_display_data") return;
    const did = m.content.transient?.display_id;
    for (const { cell, index } of this.displays.get(did) || []) {
      const prev = cell.outputs[index];
      cell.replaceOutput(index, { ...prev, data: m.content.data || {}, metadata: m.content.metadata || {} });
    }
  }

  dropDisplays(cell) {
    for (const [id, list] of this.displays) {
      const keep = list.filter((d) => d.cell !== cell);
      if (keep.length) this.displays.set(id, keep);
      else this.displays.delete(id);
    }
  }

  /** Sends a shell request to the kernel; resolves with its reply's content. */
  kernelRequest(type, content) {
    if (!this.kernel) return Promise.reject(new Error("no kernel"));
    return this.kernel.request(type, content);
  }

  async interrupt() {
    if (!this.kernel) return;
    try {
      await kernels.interrupt(this.kernel.kernelId);
    } catch (e) {
      this.showBanner(`Interrupt failed: ${e.message}`);
    }
  }

  async restart() {
    if (!this.kernel) return this.startSession();
    this.setStatus("restarting");
    try {
      const m = await kernels.restart(this.kernel.kernelId);
      this.emit("linger:kernel", { kernelId: this.kernel.kernelId, sessionId: this.sessionId, path: this.path, restarted: true, trace: m?.trace });
      this.hideBanner();
      for (const c of this.cells) c.setPrompt(false);
      if (this.kernel.state === "disconnected" || this.kernel.state === "dead" || this.kernel.ws?.readyState !== WebSocket.OPEN) this.kernel.connect();
    } catch (e) {
      if (e.status === 404) {
        // The kernel is gone for good: a new session gets a new one.
        await this.startSession();
      } else this.showBanner(`Restart failed: ${e.message}`, { restart: true });
    }
  }

  markDirty() {
    if (!this.model) return;
    this.dirty = true;
    this.setSaveState("dirty", "Unsaved changes");
  }

  setSaveState(state, text) {
    this.saveEl.dataset.state = state;
    this.saveEl.textContent = text;
  }

  /** Saves the notebook (one save at a time; a save asked for meanwhile follows). */
  async save() {
    if (!this.model) return;
    if (this.saving) {
      this.saveAgain = true;
      return this.saving;
    }
    this.dirty = false;
    this.setSaveState("saving", "Saving…");
    const content = { ...this.model, cells: this.cells.map((c) => c.toJSON()) };
    this.saving = contents
      .save(this.path, { type: "notebook", format: "json", content })
      .then((m) => {
        this.lastModified = m?.last_modified;
        if (!this.dirty) this.setSaveState("saved", "Saved " + new Date().toLocaleTimeString());
      })
      .catch((e) => {
        this.dirty = true;
        this.setSaveState("error", `Save failed: ${e.message}`);
      })
      .finally(() => {
        this.saving = null;
        if (this.saveAgain) {
          this.saveAgain = false;
          this.save();
        }
      });
    return this.saving;
  }

  /**
   * Scrolls to a cell and selects it, with the cursor at the start of line
   * (1-based) when given (the timeline's cell bands and sites call this).
   */
  scrollToCell(id, line) {
    const c = this.cells.find((x) => x.id === id);
    if (!c) return false;
    c.el.scrollIntoView({ block: "center", behavior: "smooth" });
    this.select(c);
    const doc = c.editor.state.doc;
    if (line >= 1 && line <= doc.lines) {
      if (c.type === "markdown") c.edit();
      c.editor.dispatch({ selection: { anchor: doc.line(line).from }, scrollIntoView: true });
    }
    c.focus();
    return true;
  }

  /**
   * Sets a cell's gutter annotations: byLine maps a 1-based line to
   * {text, title, lingering}. Returns false for an unknown cell.
   */
  setLineAnnotations(id, byLine) {
    const c = this.cells.find((x) => x.id === id);
    if (!c) return false;
    c.setLineAnnotations(byLine);
    return true;
  }

  emit(name, detail) {
    document.dispatchEvent(new CustomEvent(name, { detail }));
  }
}
