// The timeline's export links. The server says which exports it can make
// of the trace now (GET …/exports: a memory_viz JSON snapshot past what
// memory_viz opens cannot be made); a format it cannot make is shown
// without its link, its reason beside it. A download that fails anyway
// says the server's message beside its link, rather than nothing.

import { el } from "./dom.js";

/** FORMATS are the export formats as the server names them, and their labels, in order. */
export const FORMATS = [["perfetto", "Perfetto"], ["memviz-json", "memory_viz JSON"], ["memviz-pickle", "pickle"], ["pprof", "pprof"]];

// A live trace grows: its formats are asked again when the links are
// pointed at or focused, at most this often.
const RECHECK_MS = 5000;

const CSS = `.lt-exports a[aria-disabled=true]{color:#555;text-decoration:none;cursor:not-allowed}
.lt-export-note{color:#555;margin-left:.3em}
.lt-export-note:empty{display:none}
.lt-export-note[data-state=failed]{color:#a00}`;

let styled = false, ids = 0;
function injectStyle() {
  if (styled) return;
  styled = true;
  document.head.append(el("style", {}, CSS));
}

/** ExportLinks is the toolbar's "Export:" links of one view's source; root is its element. */
export class ExportLinks {
  constructor(source) {
    injectStyle();
    this.source = source;
    this.links = new Map();
    this.checked = 0;
    this.root = el("span", { class: "lt-exports", "data-testid": "timeline-exports" }, "Export: ");
    for (const [f, label] of FORMATS) {
      const note = el("span", { class: "lt-export-note", id: `lt-export-${f}-${++ids}`, "data-testid": `export-${f}-note`, "aria-live": "polite" });
      const a = el("a", {
        href: source.exportURL(f), download: "", "data-testid": `export-${f}`, class: "lt-link",
        "aria-label": `Export as ${label}`, "aria-describedby": note.id, onclick: (e) => this.download(e, f),
      }, label);
      this.links.set(f, { a, note, url: a.href });
      this.root.append(a, note, " ");
    }
    // Asked once the page is idle: the server measures the memory_viz
    // JSON with a pass over the trace, which must not slow the first
    // paint's.
    if (window.requestIdleCallback) requestIdleCallback(() => this.check(), { timeout: 2000 });
    else setTimeout(() => this.check(), 0);
    if (source.live) for (const ev of ["pointerenter", "focusin"]) this.root.addEventListener(ev, () => this.check(true));
  }

  /** check asks the server which formats it can make now (again only past RECHECK_MS when again). */
  async check(again = false) {
    const now = Date.now();
    if (this.checking || (again && now - this.checked < RECHECK_MS)) return;
    this.checking = true;
    try {
      const res = await fetch(`${this.source.prefix}/exports`, { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!res.ok) return; // the links stay; a download says what is wrong
      for (const f of (await res.json()).formats || []) this.offer(f);
    } catch { /* offline: the links stay */ } finally {
      this.checking = false;
      this.checked = Date.now();
      this.root.dataset.checked = String(this.checked); // when the server last said
    }
  }

  /** offer shows one format of the server's answer: its link, or its reason without one. */
  offer({ name, ok, reason }) {
    const l = this.links.get(name);
    if (!l || l.busy) return;
    if (ok) {
      l.a.setAttribute("href", l.url);
      l.a.removeAttribute("aria-disabled");
      if (l.note.dataset.state === "off") this.note(l, "", "");
      return;
    }
    l.a.removeAttribute("href");
    l.a.setAttribute("aria-disabled", "true");
    this.note(l, `(${reason || "cannot be made"})`, "off");
  }

  note(l, text, state) {
    l.note.textContent = text;
    if (state) l.note.dataset.state = state;
    else delete l.note.dataset.state;
  }

  /**
   * download fetches the export itself rather than leave it to the
   * browser, which says nothing of a download that failed: the file is
   * saved from the answer, or the server's message shown beside the link.
   */
  async download(e, f) {
    const l = this.links.get(f);
    e.preventDefault();
    if (l.busy || !l.a.hasAttribute("href")) return;
    l.busy = true;
    this.note(l, "preparing…", "busy");
    try {
      const res = await fetch(l.url, { credentials: "same-origin" });
      if (!res.ok) {
        let msg = res.statusText;
        try { msg = (await res.json()).message || msg; } catch { /* not JSON */ }
        this.note(l, `failed: ${msg}`, "failed");
        return;
      }
      const name = /filename="([^"]+)"/.exec(res.headers.get("Content-Disposition") || "")?.[1] || `trace-${f}`;
      const url = URL.createObjectURL(await res.blob());
      const save = el("a", { href: url, download: name, hidden: "" });
      document.body.append(save);
      save.click();
      save.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
      this.note(l, "", "");
    } catch (err) {
      this.note(l, `failed: ${err.message}`, "failed");
    } finally {
      l.busy = false;
    }
  }
}
