// Jupyter's keyboard: the command-mode keys (Esc leaves a cell's editor;
// single keys then act on the selected cell) and the list the shortcuts
// dialog shows. The Notebook runs the actions named here.

/** What the shortcuts dialog lists, as README's notebook section does. */
export const SHORTCUTS = [
  {
    title: "Command mode (Esc)",
    keys: [
      [["Enter"], "Edit the selected cell"],
      [["Shift-Enter"], "Run the cell and select the next (a new cell at the end)"],
      [["Ctrl-Enter"], "Run the cell, staying on it"],
      [["Alt-Enter"], "Run the cell and insert a cell below"],
      [["A"], "Insert a cell above"],
      [["B"], "Insert a cell below"],
      [["D D"], "Delete the cell"],
      [["Z"], "Undo the last delete"],
      [["M"], "Make the cell Markdown"],
      [["Y"], "Make the cell code"],
      [["J", "↓"], "Select the cell below"],
      [["K", "↑"], "Select the cell above"],
      [["Shift-J", "Shift-↓"], "Extend the selection down"],
      [["Shift-K", "Shift-↑"], "Extend the selection up"],
      [["Shift-M"], "Merge the selected cells (one selected: with the cell below)"],
      [["I I"], "Interrupt the kernel"],
      [["0 0"], "Restart the kernel (asks first)"],
      [["H", "?"], "Show these shortcuts"],
      [["Ctrl-S"], "Save"],
    ],
  },
  {
    title: "Edit mode (in a cell's editor)",
    keys: [
      [["Esc"], "Command mode (Esc then Tab moves on through the page)"],
      [["Shift-Enter"], "Run the cell and edit the next (a new cell at the end)"],
      [["Ctrl-Enter"], "Run the cell, staying in it"],
      [["Alt-Enter"], "Run the cell and insert a cell below"],
      [["Tab"], "Complete the name from the kernel (at a line's start: indent)"],
      [["Shift-Tab"], "Show the name's signature and doc (at a line's start: dedent)"],
      [["Ctrl-Shift--"], "Split the cell at the cursor"],
      [["Ctrl-S"], "Save"],
    ],
  },
];

/** Keys pressed twice within this many milliseconds: D D, I I, 0 0. */
const TWICE_MS = 1000;

const SINGLE = {
  a: "insert-above",
  b: "insert-below",
  z: "undo-delete",
  m: "to-markdown",
  y: "to-code",
  j: "select-next",
  k: "select-prev",
  ArrowDown: "select-next",
  ArrowUp: "select-prev",
  h: "shortcuts",
  Enter: "edit",
};

// With Shift: JupyterLab's selection of several cells.
const SHIFTED = {
  j: "extend-next",
  k: "extend-prev",
  ArrowDown: "extend-next",
  ArrowUp: "extend-prev",
  m: "merge",
};

const TWICE = { d: "delete", i: "interrupt", 0: "restart" };

/**
 * CommandKeys turns command-mode keydowns into action names; it remembers
 * the last key for the two-key sequences.
 */
export class CommandKeys {
  constructor() {
    this.last = null; // {key, at}
  }

  /** action returns the action of keydown ev, or "" for a key it leaves alone. */
  action(ev) {
    if (ev.isComposing) return "";
    const prev = this.last;
    this.last = null;
    const mods = [ev.altKey, ev.ctrlKey || ev.metaKey, ev.shiftKey].filter(Boolean).length;
    if (ev.key === "Enter" && mods === 1) {
      if (ev.shiftKey) return "run-advance";
      if (ev.ctrlKey || ev.metaKey) return "run";
      if (ev.altKey) return "run-insert";
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return "";
    if (ev.key === "?") return "shortcuts";
    const key = ev.key.length === 1 ? ev.key.toLowerCase() : ev.key;
    if (ev.shiftKey) return SHIFTED[key] || "";
    if (TWICE[key]) {
      // A held key repeats: it is still one press.
      if (ev.repeat) {
        this.last = prev;
        return "pending";
      }
      if (prev && prev.key === key && ev.timeStamp - prev.at <= TWICE_MS) return TWICE[key];
      this.last = { key, at: ev.timeStamp };
      return "pending";
    }
    return SINGLE[key] || "";
  }
}
