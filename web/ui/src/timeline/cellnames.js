// Notebook cells named as the user sees them: "In [3], cell 4, line 2",
// the execution count a notebook shows beside the cell and the cell's
// place in the notebook, never the cell's id (which the user never sees:
// it is in the hover title only).
//
// The count comes from the trace (a cell scope's count, the analyzer's
// report's cells); the position from the notebook on the page when there
// is one (the cell's place among the page's cells), else from the report
// (the order of the cells' first runs: the notebook's order when it was
// run from the top). A trace written before cells carried a count names
// the cell by its position alone.

export class CellNames {
  constructor(doc = globalThis.document) {
    this.doc = doc;
    this.cells = new Map(); // id → { count, position }
  }

  /** learn takes the report's cells ([{id, count, position}]). */
  learn(cells) {
    for (const c of cells || []) this.cells.set(c.id, { count: c.count || 0, position: c.position || 0 });
  }

  /** position is the cell's place (1-based): on the page's notebook, else in the trace; 0 if unknown. */
  position(id) {
    return this.pagePlaces().get(id) || this.cells.get(id)?.position || 0;
  }

  // The places of the page's cells, read again at most every half second
  // (a frame names every cell band in view).
  pagePlaces() {
    const now = Date.now();
    if (!this.places || now - this.placesAt > 500) {
      const cells = this.doc?.querySelectorAll?.("[data-testid=cell][data-cell-id]") || [];
      this.places = new Map([...cells].map((c, i) => [c.dataset.cellId, i + 1]));
      this.placesAt = now;
    }
    return this.places;
  }

  /** cell names a cell: "In [3], cell 4"; count is the run's own (a scope's), else the cell's latest known. */
  cell(id, count) {
    count ||= this.cells.get(id)?.count || 0;
    const pos = this.position(id), parts = [];
    if (count) parts.push(`In [${count}]`);
    parts.push(pos ? `cell ${pos}` : `cell ${id}`);
    return parts.join(", ");
  }

  /** short names a cell for a narrow band: "[3]", else "cell 4". */
  short(id, count) {
    count ||= this.cells.get(id)?.count || 0;
    if (count) return `[${count}]`;
    const pos = this.position(id);
    return pos ? `cell ${pos}` : `cell ${id}`;
  }

  /** line names a cell line: "In [3], cell 4, line 2". */
  line(id, line) { return `${this.cell(id)}, line ${line}`; }

  /** title is the hover title that keeps the cell's id. */
  title(id) { return `cell id ${id}`; }

  /**
   * stack names a notebook call stack, outermost first ([{cell, line,
   * func}], a report's site_table stack): "In [2], cell 4, line 2 →
   * cell y, line 3 (prefill)", as analyze.CellNames.Stack does.
   */
  stack(frames) {
    return (frames || []).map((f) => this.frame(f)).join(" → ");
  }

  /** frame names one notebook frame ({cell, line, func}): "In [1], cell 3, line 2 (prefill)" in a helper, its line alone at a cell's top level. */
  frame(f) {
    // A program's frame (a PyTorch snapshot's user's code) has a file, not a cell: "model.py:42 (forward)".
    const where = !f.cell && f.file ? `${f.file.split("/").slice(-2).join("/")}:${f.line}` : this.line(f.cell, f.line);
    return `${where}${f.func && f.func !== "<toplevel>" ? ` (${f.func})` : ""}`;
  }
}
