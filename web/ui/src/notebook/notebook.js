// The notebook page's controller: loads the notebook, takes over the cells
// the server rendered, runs cells on the kernel, saves, and keeps the kernel
// status and the banner honest. The toolbar's kernel picker starts the
// kernelspec the notebook's metadata asks for when the server offers it
// (else the default, saying so in the kernel notice), and changes the
// session's kernel, recording the choice in metadata.kernelspec.
//
// For the timeline (another bundle) it dispatches on document:
//   linger:kernel  {kernelId, sessionId, path}  when a kernel is connected
//   linger:execute {cellId, msgId, phase: "start"|"end", status}
// and listens for linger:goto-cell {cellId}. window.linger.notebook is this
// object (see scrollToCell, setLineAnnotations).

import { contents, sessions, kernels } from "./api.js";
import { KernelClient } from "./kernel.js";
import { Cell } from "./cell.js";
import { toOutput } from "./outputs.js";
import { startName, kernelNotice, kernelspecMetadata } from "./kernelspecs.js";

const AUTOSAVE_MS = 30000;

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
    this.selected = null;
    this.dirty = false;
    this.saving = null;
    this.displays = new Map(); // display_id → [{cell, index}]
    this.kernel = null;
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
        restart: () => this.restart(),
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
      } else if (ev.shiftKey && ev.key === "Enter" && ev.target.closest?.(".markdown")) {
        ev.preventDefault();
        this.advance(this.cellOf(ev.target));
      }
    });
  }

  /** The key bindings of a cell's editor. */
  keysFor(cell) {
    return [
      { key: "Shift-Enter", run: () => (this.runAndAdvance(cell), true) },
      { key: "Mod-Enter", run: () => (this.run(cell), true) },
      { key: "Mod-s", run: () => (this.save(), true), preventDefault: true },
      { key: "Escape", run: () => (cell.type === "markdown" ? (cell.render(), cell.focus(), true) : false) },
    ];
  }

  cellOf(elem) {
    const e = elem.closest("[data-testid=cell]");
    return this.cells.find((c) => c.el === e);
  }

  index(cell) {
    return Math.max(0, this.cells.indexOf(cell));
  }

  select(cell) {
    if (!cell || this.selected === cell) return;
    this.selected?.el.classList.remove("selected");
    this.selected = cell;
    cell.el.classList.add("selected");
  }

  insertCell(i, type) {
    const c = new Cell(this, { cell_type: type, metadata: {}, source: "", outputs: [], execution_count: null });
    const ref = this.cells[i];
    if (ref) ref.el.before(c.el);
    else this.cellsEl.append(c.el);
    this.cells.splice(i, 0, c);
    this.select(c);
    c.focus();
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
      this.cells.splice(i, 1);
      cell.el.remove();
      if (this.cells.length === 0) this.insertCell(0, "code");
      this.select(this.cells[Math.min(i, this.cells.length - 1)]);
      this.selected.focus();
    } else if (a === "add-below") {
      this.insertCell(i + 1, "code");
      return;
    } else if (a === "toggle-type") {
      const m = cell.toJSON();
      m.cell_type = cell.type === "code" ? "markdown" : "code";
      const c = new Cell(this, m);
      cell.el.replaceWith(c.el);
      this.cells[i] = c;
      this.select(c);
    } else return;
    this.markDirty();
  }

  advance(cell) {
    const i = this.index(cell);
    const next = this.cells[i + 1] || this.insertCell(i + 1, "code");
    this.select(next);
    next.focus();
  }

  runAndAdvance(cell) {
    this.run(cell);
    this.advance(cell);
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
      await kernels.restart(this.kernel.kernelId);
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
