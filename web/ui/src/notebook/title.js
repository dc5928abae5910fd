// The notebook's title renames it, as JupyterLab's does: a click (or
// Enter on it) makes it a field; Enter or leaving the field renames the
// file through the contents API (PATCH), Esc keeps the old name. The
// page's address follows (history.replaceState), and an error (the name
// taken, a bad name) is said beside the title, the field kept open.
import { base, contents, sessions, escapePath } from "./api.js";

/** newPath is the path a title renames the notebook at path to, or throws why it cannot. */
export function newPath(path, name) {
  name = name.trim();
  if (!name) throw new Error("The name cannot be empty.");
  if (name.includes("/") || name.includes("\\")) throw new Error("The name cannot contain / or \\.");
  if (name.startsWith(".")) throw new Error("The name cannot start with a dot.");
  if (!name.endsWith(".ipynb")) name += ".ipynb";
  const i = path.lastIndexOf("/");
  return i < 0 ? name : path.slice(0, i + 1) + name;
}

export class Title {
  /** nb is the Notebook; it has path, sessionId and root. */
  constructor(nb) {
    this.nb = nb;
    this.button = nb.root.ownerDocument.querySelector("[data-testid=notebook-title]");
    this.error = nb.root.ownerDocument.querySelector("[data-testid=rename-error]");
    this.button?.addEventListener("click", () => this.edit());
  }

  edit() {
    if (this.input) return;
    const name = this.nb.path.split("/").pop();
    const input = document.createElement("input");
    input.type = "text";
    input.className = "nb-title-input";
    input.dataset.testid = "notebook-title-input";
    input.setAttribute("aria-label", "Notebook name");
    input.value = name;
    this.input = input;
    this.button.hidden = true;
    this.button.after(input);
    input.focus();
    input.setSelectionRange(0, name.endsWith(".ipynb") ? name.length - 6 : name.length);
    input.addEventListener("keydown", (ev) => {
      ev.stopPropagation(); // never a command key
      if (ev.key === "Enter") { ev.preventDefault(); this.commit(); }
      else if (ev.key === "Escape") { ev.preventDefault(); this.close(); }
    });
    input.addEventListener("blur", () => { if (!this.busy) this.commit(); });
  }

  close() {
    const input = this.input;
    if (!input) return;
    // Forgotten before it goes: removing the focused field blurs it, and
    // the blur must not commit (and close) a second time, which threw
    // "the node to be removed is no longer a child" on every Enter.
    this.input = null;
    input.remove();
    this.button.hidden = false;
    this.button.focus();
  }

  async commit() {
    if (!this.input) return;
    if (this.busy) {
      // An Enter while a rename is on its way (one a blur began, say):
      // tried again once that one is answered, if the name changed.
      this.again = true;
      return;
    }
    const old = this.nb.path;
    let to;
    try {
      to = newPath(old, this.input.value);
    } catch (e) {
      return this.fail(e.message);
    }
    if (to === old) {
      this.error.textContent = "";
      return this.close();
    }
    this.busy = true;
    this.again = false;
    const tried = this.input.value;
    try {
      await contents.rename(old, to);
    } catch (e) {
      this.busy = false;
      this.fail(e.status === 409 ? `Could not rename: ${to.split("/").pop()} already exists.` : `Could not rename: ${e.message}`);
      if (this.again && this.input && this.input.value !== tried) return this.commit();
      return;
    }
    this.busy = false;
    this.renamed(to);
    if (this.nb.sessionId) sessions.rename(this.nb.sessionId, to).catch(() => {}); // the kernel runs on either way
    this.error.textContent = "";
    this.close();
  }

  fail(text) {
    this.error.textContent = text;
    this.input?.focus();
  }

  /** renamed makes the page the notebook's at path to. */
  renamed(to) {
    const name = to.split("/").pop();
    this.nb.path = to;
    this.nb.cellsEl.dataset.path = to;
    this.button.textContent = name;
    document.title = `${name} · Linger`;
    history.replaceState(history.state, "", `${base}notebooks/${escapePath(to)}${location.search}${location.hash}`);
    this.nb.emit("linger:renamed", { path: to });
  }
}
