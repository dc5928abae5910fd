// The timeline view: one canvas with four tracks (time axis, scope bands
// and marks, memory over time stacked by category with the allocated /
// reserved / device-used lines, and the object view), a toolbar, a
// tooltip, a detail panel and a findings panel. Large data never becomes
// DOM nodes: everything per event or per bucket is drawn on the canvas.

import { CATEGORIES, CATEGORY_COLOURS, SITE_COLOURS, TRACKS, LINGERING, SCOPE_COLOURS, hatch, bytes, sizes, sizeRange, rate, duration, perSecond } from "./palette.js";
import { stack } from "./layout.js";
import { columns, areaPath, linePath } from "./columns.js";
import { HOST_H as HOST_LANE_H, drawHostLane, hostTooltip } from "./hostlane.js";
import { SERVICE_H, drawServiceLanes, serviceTooltip } from "./servicelane.js";
import { renderService } from "./service.js";
import { Axis, EventAxis, findIdle, idleLabel } from "./axis.js";
import { yOf, yTicks } from "./yscale.js";
import { applyPrefs, buildLegend, displayControls, showBaseline, baselineAt } from "./legend.js";
import { SegmentsPanel } from "./segments.js";
import { AllocationsPanel } from "./allocations.js";
import { CellNames } from "./cellnames.js";
import { renderDetail, renderGroup, starlarkFrames, frameText, holderGroup } from "./detail.js";
import { toHost, toSite, toTracks } from "./leads.js";
import { el, menu } from "./dom.js";
import { warmUp } from "./warmup.js";
import { ExportLinks } from "./exports.js";

const AXIS = 20, SCOPE_ROW = 12, SCOPE_KINDS = ["cell", "request", "batch", "step"];
const MEM_H = 170, GAP = 8, MIN_OBJ_H = 160, MEM_SHORT_H = 130, MIN_OBJ_SHORT_H = 100;
const ALLOC_H = 30; // the allocation rate's lane (drawAllocs)
const WEIGHTS = CATEGORIES.indexOf("weights"); // folded out of the chart by default (legend.js)
const OBJECTS_N = 400, POLL_MS = 500;
// How long a view waits, after a partial answer, to ask again for a
// saved trace the server is reading (the server holds each ask up to
// 100 ms for the pass to end: live.partialWait).
const READ_POLL_MS = 150;
// The least span following shows: a cell that ran for microseconds is
// seen in the middle of 10 ms, not stretched across the view.
const FOLLOW_MIN_NS = 1e7;
// How often a whole view asks again while the server's pass over its
// trace, which the objects, scopes and findings wait for, goes on
// (whilePassing): to say how far it has come.
const PASS_POLL_MS = 500;
// The longest the findings wait for the events to pause before asking
// for a newer report.
const FINDINGS_MAX_MS = 2000;
// A lingering object is drawn at least this tall (CSS px) whatever its
// size, on top of its neighbours, so that it can be seen and clicked.
const LINGER_H = 9;
// The Go heap lane's height when collapsed: its title alone.
const HOST_COLLAPSED_H = 16;

let views = 0;

/** readPercent is how much of a saved trace's file its pass has read ({read_bytes, file_bytes}), in whole percent. */
const readPercent = (r) => (r.file_bytes ? Math.floor((100 * r.read_bytes) / r.file_bytes) : 0);

export class TimelineView {
  /** root is the [data-testid=timeline] container; source a TraceSource or KernelSource. */
  constructor(root, source) {
    this.root = root;
    this.source = source;
    this.view = { t0: 0, t1: 1e9 }; // ns
    this.fitted = false;
    this.follow = source.live;
    this.buckets = [];
    this.objects = [];
    this.objHeight = 1;
    this.scopes = [];
    this.marks = [];
    this.gen = 0;
    this.frames = []; // draw times, ms (window.linger.timeline.frameTimes)
    this.idle = null; // where the events are: {first, last, breaks} (axis.js)
    this.axis = new Axis(0, 1e9, 1000);
    applyPrefs(this); // hidden categories, log scale, Go heap lane (legend.js)
    this.names = new CellNames(); // cells as the user sees them (cellnames.js)
    this.build();
    this.unsub = source.onChange((what) => this.sourceChanged(what));
    new ResizeObserver(() => this.resize()).observe(this.body);
    // A window made shorter or taller than a short screen's (resize's
    // lanes) changes no width the observer sees.
    let wasShort = window.innerHeight < 900;
    window.addEventListener("resize", () => { const short = window.innerHeight < 900; if (short !== wasShort) { wasShort = short; this.resize(); } }, { signal: this.life.signal });
    this.resize();
    this.refresh(true);
    this.loadFindings();
    // A kernel's view waits for a cell: compile its drawing meanwhile.
    if (source.live) warmUp(this);
  }

  build() {
    this.id = ++views; // ids unique on a page of several views (the compare view's two)
    // The accessible name starts with the visible text (WCAG 2.5.3); the
    // symbols' names are words.
    const btn = (label, title, fn, name) => el("button", { type: "button", class: "lt-btn", title, ...(name ? { "aria-label": name } : {}), onclick: fn }, label);
    this.followBtn = el("button", { type: "button", class: "lt-btn lt-toggle", "data-testid": "timeline-follow", title: "Follow the end of the trace while it grows (f)" }, "Follow live");
    this.followBtn.addEventListener("click", () => this.setFollow(!this.follow));
    this.setFollow(this.follow, true);
    this.status = el("span", { class: "lt-status", role: "status", "data-testid": "timeline-status" });
    // The formats the server can make now, the others with why (exports.js).
    const exports = new ExportLinks(this.source).root;
    // A saved trace's own file, for linger trace analyze elsewhere.
    if (/\/api\/timeline\/traces\/[^/]+$/.test(this.source.prefix)) {
      exports.append(el("a", { href: `${this.source.prefix}/file`, download: "", "data-testid": "export-ltrace", class: "lt-link", title: "Download the trace file, for linger trace analyze" }, "trace file"), " ");
    }
    // What the view listens to outside its own elements goes with it.
    this.life = new AbortController();
    // One row in a notebook's dock (1366 px wide screens): what changes
    // how the chart is drawn, and the exports, are menus.
    this.toolbar = el("div", { class: "lt-toolbar", role: "toolbar", "aria-label": "Timeline" },
      btn("Fit", "Show every event, first to last, idle stretches collapsed (0)", () => this.fit()),
      btn("−", "Zoom out (-)", () => this.zoom(2), "Zoom out"),
      btn("+", "Zoom in (+)", () => this.zoom(0.5), "Zoom in"),
      ...(this.source.live ? [this.followBtn] : []),
      menu("Display", "timeline-display", "How the chart is drawn: weights folded, log scale, baseline, event axis, the Go heap lane", displayControls(this), this.life.signal),
      btn("Allocator", "The allocator's segments and free space at the cursor, the selected object's allocation or the end (s)", () => this.openSegments()),
      btn("Allocations", "The allocations in view by the line that made them, freed or not: churn the memory chart does not show", () => this.allocations.open()),
      menu("Export", "timeline-export-menu", "Download the trace for Perfetto, memory_viz or pprof", [exports], this.life.signal),
      this.status);
    this.segments = new SegmentsPanel(this);
    this.allocations = new AllocationsPanel(this);
    this.canvas = el("canvas", {
      class: "lt-canvas", tabindex: "0", "data-testid": "timeline-canvas", role: "img",
      "aria-label": "Memory timeline. Left and right arrows pan, + and - zoom, Home and End go to the start and the end, 0 fits, f follows live, b sets the baseline at the cursor; up and down arrows step through the objects, lingering first, and Enter shows the one selected; shift-drag zooms to a range.",
      "aria-describedby": `lt-said-${this.id}`,
    });
    // What the keyboard selected, read out by screen readers.
    this.said = el("p", { id: `lt-said-${this.id}`, class: "lt-sr", "aria-live": "polite", "data-testid": "timeline-said" });
    this.tooltip = el("div", { class: "lt-tooltip", role: "tooltip", "data-testid": "timeline-tooltip", hidden: "" });
    // The idle breaks' labels (axis.js), over the canvas's axis row.
    this.breakLabels = el("div", { class: "lt-breaks", "data-testid": "timeline-breaks" });
    this.body = el("div", { class: "lt-body" }, this.canvas, this.breakLabels, this.tooltip, this.said);
    this.legend = el("div", { class: "lt-legend", "data-testid": "timeline-legend", role: "group", "aria-label": "Categories: press to hide or show" });
    buildLegend(this);
    this.detail = el("section", { class: "lt-detail", "data-testid": "timeline-detail", "aria-live": "polite" }, el("p", { class: "lt-hint" }, "Click an object for its details."));
    // How far the analysis has come, for a live trace whose report lags
    // what the stream has told of: one live region, kept across updates.
    this.findingsStatus = el("p", { class: "lt-hint", role: "status", "aria-live": "polite", "aria-atomic": "true", "data-testid": "findings-progress" });
    this.findingsBody = el("div", {}, el("p", { class: "lt-hint" }, "Loading…"));
    this.findings = el("section", { class: "lt-findings", "data-testid": "timeline-findings" }, el("h2", { class: "lt-h" }, "Findings"), this.findingsStatus, this.findingsBody);
    this.root.replaceChildren(this.toolbar, this.body, this.legend, el("div", { class: "lt-panels" }, this.detail, this.findings), this.segments.root, this.allocations.root);
    injectStyle();
    this.bindInput();
  }

  // --- geometry -----------------------------------------------------------

  resize() {
    const w = Math.max(200, this.body.clientWidth);
    const HOST_H = this.hostH = this.hostCollapsed ? HOST_COLLAPSED_H : HOST_LANE_H;
    // A watched service's goroutines and GC pauses have lanes of their own.
    const SVC_H = this.report?.service ? SERVICE_H + GAP : 0;
    // A short screen (a 1366×768 laptop) keeps the findings in sight
    // under the chart: shorter memory and object lanes.
    const short = window.innerHeight < 900;
    const MEM = this.memH = short ? MEM_SHORT_H : MEM_H, MIN_OBJ = short ? MIN_OBJ_SHORT_H : MIN_OBJ_H;
    // The body holds the canvas, so its height is the canvas's own once
    // drawn: on a short screen the objects lane keeps to its least, or a
    // canvas made on a taller one would never shrink.
    const room = short ? 0 : this.body.clientHeight - (AXIS + SCOPE_KINDS.length * SCOPE_ROW + MEM + ALLOC_H + HOST_H + SVC_H + 4 * GAP);
    const h = AXIS + SCOPE_KINDS.length * SCOPE_ROW + GAP + MEM + GAP + ALLOC_H + GAP + HOST_H + GAP + SVC_H + Math.max(MIN_OBJ, room);
    const dpr = window.devicePixelRatio || 1;
    this.W = w; this.H = h;
    this.canvas.width = Math.round(w * dpr); this.canvas.height = Math.round(h * dpr);
    this.canvas.style.width = `${w}px`; this.canvas.style.height = `${h}px`;
    this.ctx = this.canvas.getContext("2d");
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const mem = AXIS + SCOPE_KINDS.length * SCOPE_ROW + GAP, allocs = mem + MEM + GAP, host = allocs + ALLOC_H + GAP;
    this.tracks = {
      scopes: AXIS,
      mem,
      allocs, // the allocation rate (drawAllocs)
      host, // the Go heap's own lane (hostlane.js)
      service: SVC_H ? host + HOST_H + GAP : undefined, // servicelane.js
      obj: host + HOST_H + GAP + SVC_H,
    };
    this.tracks.objH = h - this.tracks.obj - 4;
    this.have = null;
    this.setAxis();
    this.refresh();
  }

  // Time ↔ x through the axis (axis.js): piecewise linear when idle
  // stretches are collapsed into breaks.
  x(t) { return this.axis.x(t); }
  t(x) { return this.axis.t(x); }

  /**
   * collapsesIdle: whether idle stretches become breaks (the compare
   * view's linked axes do not, nor a watched service's timeline, whose
   * samples are apart by design).
   */
  get collapsesIdle() { return !this.report?.service; }

  setAxis() {
    // memory_viz's event-indexed axis once the overview is there (legend.js's toggle).
    if (this.eventAxis && this.collapsesIdle && this.overview?.length) { this.axis = new EventAxis(this.view.t0, this.view.t1, this.W || 1000, this.overview); return; }
    const breaks = this.collapsesIdle && this.idle ? this.idle.breaks : [];
    this.axis = new Axis(this.view.t0, this.view.t1, this.W || 1000, breaks);
  }

  setView(t0, t1, userAction) {
    const span = Math.max(t1 - t0, 1000);
    this.view = { t0: Math.max(0, t0), t1: Math.max(0, t0) + span };
    this.setAxis();
    if (userAction) this.moved = true; // a saved trace being read no longer shows the whole of it (whileReading)
    if (userAction && this.follow && this.view.t1 < this.source.end()) this.setFollow(false, true); // looking back leaves follow mode
    this.refresh();
  }

  setFollow(on, quiet) {
    this.follow = on;
    this.followBtn.setAttribute("aria-pressed", String(on));
    if (on && !quiet) this.toEnd();
  }

  /**
   * fit shows where the events are, first to last with a small margin,
   * idle stretches collapsed; then looks again for where they are (the
   * first time, or after new events) and fits again if that moved.
   */
  fit() {
    this.fitNow();
    const key = this.fitKey;
    this.updateIdle().then((changed) => { if (changed && this.fitKey === key) this.fitNow(); });
  }

  fitNow() {
    const idle = this.collapsesIdle && this.idle;
    if (!idle) this.setView(0, Math.max(this.source.end() * 1.02, 1e6), false);
    else {
      let active = idle.last - idle.first;
      for (const b of idle.breaks) active -= b.t1 - b.t0;
      const m = Math.max(active * 0.02, 2e4);
      this.setView(Math.max(0, idle.first - m), Math.max(idle.last + m, idle.first + 1e5), false);
    }
    this.fitKey = `${this.view.t0}:${this.view.t1}`;
  }

  /** updateIdle finds where the events are (axis.js findIdle); answers whether that changed. At most one search at a time. */
  updateIdle() {
    if (!this.collapsesIdle) return Promise.resolve(false);
    if (this.idleSearch) return this.idleSearch;
    const end = this.source.end();
    if (!(end > 0) || (this.idle && this.idleEnd === end)) return Promise.resolve(false);
    // The first query is over the whole trace: the event axis's overview.
    let overview = null;
    const lod = async (t0, t1, px) => { const b = await this.source.lod(t0, t1, px); overview ??= b; return b; };
    this.idleSearch = findIdle(lod, end).then((idle) => {
      const changed = JSON.stringify(idle) !== JSON.stringify(this.idle);
      this.idle = idle; this.idleEnd = end; this.overview = overview;
      if (changed || this.eventAxis) { this.setAxis(); this.refresh(); }
      return changed;
    }, () => false).finally(() => { this.idleSearch = null; });
    return this.idleSearch;
  }

  zoom(f, at = this.W / 2) {
    const [t0, t1] = this.axis.zoomed(f, at);
    this.setView(t0, t1, true);
  }
  pan(dx) {
    const [t0, t1] = this.axis.shifted(dx);
    this.setView(t0, t1, true);
  }
  toStart() {
    if ((this.axis.breaks.length || this.axis.eventIndexed) && this.idle) {
      // At the same scale, the first event a little in from the left edge.
      const [t0, t1] = this.axis.shifted(this.x(this.idle.first) - 0.02 * this.W);
      this.setView(t0, t1, true);
      return;
    }
    const span = this.view.t1 - this.view.t0;
    this.setView(0, span, true);
  }
  toEnd() {
    const span = this.view.t1 - this.view.t0, end = this.source.end();
    if (this.follow && this.source.live) {
      // Following a kernel: the running (or last) cell's activity, from
      // its start to its last memory event, not to the clock: an idle
      // kernel's counter samples and a cell that allocates nothing leave
      // the view where it is. A run shorter than FOLLOW_MIN_NS is shown
      // in the middle of that much.
      const { from, to } = this.followed(end);
      if (from <= to) {
        const span = Math.max(to - from, FOLLOW_MIN_NS), m = span * 0.03;
        const t0 = (from + to) / 2 - span / 2;
        this.setView(Math.max(0, t0 - m), Math.max(0, t0 - m) + span + 2 * m, false);
        return;
      }
    }
    if (this.axis.breaks.length || this.axis.eventIndexed) {
      const [t0, t1] = this.axis.shifted(this.x(end) - 0.95 * this.W);
      this.setView(t0, t1, false);
      return;
    }
    this.setView(Math.max(0, end - span * 0.95), Math.max(0, end - span * 0.95) + span, false);
  }

  /**
   * followed is what following frames: from the start of the cell of the
   * last memory event (the stream's, or the latest cell the scopes told
   * of that began before it) to that event; end's whole trace when the
   * pyramid knows of no such event.
   */
  followed(end) {
    const p = this.source.pyramid, to = p?.activeEnd > 0 ? p.activeEnd : end;
    let from = p?.activeEnd > 0 && p.activeCell >= 0 ? p.activeCell : null;
    if (this.cellStart != null && this.cellStart <= to && !(from >= this.cellStart)) from = this.cellStart;
    return { from: from ?? this.idle?.first ?? 0, to };
  }

  /** jump shows [t0, t1] with some margin, e.g. from a finding. */
  jump(t0, t1, finding) {
    this.pending = finding || null;
    const pad = Math.max((t1 - t0) * 0.25, 1e5);
    this.setFollow(false, true);
    this.setView(t0 - pad, t1 + pad, false);
    this.canvas.focus();
  }

  // --- data ---------------------------------------------------------------

  sourceChanged(what) {
    if (what === "state") this.showState();
    // The stream may have told of events the findings' report has not
    // analysed: say so at once, before asking for a newer report.
    this.checkFindings();
    if (what !== "events") return;
    // The findings are the analyzer's over the whole trace: ask again once
    // the events pause (a cell ended), and now and then while they go on.
    this.findingsSoon(750);
    if (!this.fitted && this.source.end() > 0) { this.fitted = true; this.fit(); return; }
    // Idle stretches may have ended or begun: look again, at most every second.
    if (performance.now() - (this.idleAsked || 0) > 1000) { this.idleAsked = performance.now(); this.updateIdle(); }
    if (this.follow) this.toEnd();
    else this.refresh();
  }

  showState() {
    const s = this.source;
    if (!s.live) return;
    const text = { connecting: "Connecting…", live: "Live", behind: "Catching up", ended: `Trace ended${s.stateDetail ? `: ${s.stateDetail}` : ""}`, disconnected: "Connection lost; reconnecting…" }[s.state] || s.state;
    // Of fixed width, so that a longer text moves nothing: the whole of it is the title.
    this.status.textContent = this.status.title = text + (s.skipped ? ` (${s.skipped.toLocaleString()} events summarised)` : "");
    this.status.dataset.state = s.state;
  }

  /** refresh asks for the view's data and draws; data requests are debounced, drawing is per frame. */
  refresh(first) {
    this.schedule();
    clearTimeout(this.fetchTimer);
    const now = performance.now();
    const wait = first ? 0 : this.source.live ? Math.max(0, POLL_MS - (now - (this.lastSlow || 0))) : 60;
    this.lodFetch();
    this.fetchTimer = setTimeout(() => this.slowFetch(), wait);
  }

  /** lodFetch keeps at most one level-of-detail request in flight, then asks again for the latest view. */
  async lodFetch() {
    if (this.lodBusy) { this.lodAgain = true; return; }
    this.lodBusy = true;
    // A saved trace's data comes over the network: ask for a view's width
    // either side too, so that a pan draws real data at once and the
    // answer only sharpens it. The local pyramid of a kernel needs no margin.
    const { t0, t1 } = this.view, m = this.source.live ? 0 : t1 - t0;
    try {
      const segs = this.axis.segments();
      if (this.axis.visible().length || this.axis.eventIndexed) {
        // Breaks in view: each stretch between them at its own resolution.
        const parts = await Promise.all(segs.map((s) => this.source.lod(s.t0, s.t1, Math.max(1, Math.ceil(s.x1 - s.x0)))));
        this.buckets = parts.flat();
        this.have = null;
        if (!this.landed()) this.schedule();
        return;
      }
      const have = this.have;
      if (!this.source.live && !this.source.reading && have && have.t0 <= t0 && t1 <= have.t1 && (t1 - t0) * 3 >= (have.t1 - have.t0) * 0.8) return; // still sharp enough
      this.buckets = await this.source.lod(t0 - m, t1 + m, Math.ceil(this.W) * (m ? 3 : 1));
      this.have = { t0: Math.max(0, t0 - m), t1: t1 + m };
      if (this.landed()) return;
      if (!this.fitted && this.source.end() > 0) { this.fitted = true; this.fit(); return; }
      this.schedule();
    } catch (e) {
      this.status.textContent = `Timeline unavailable: ${e.message}`;
      if (this.wasReading || this.wasPassing) {
        // While the trace is read, ask again, less and less often: one
        // failed ask must not leave the view half read, or saying it
        // reads, for good.
        this.status.textContent += "; trying again";
        this.readFailures = (this.readFailures || 0) + 1;
        this.askAgain(Math.min(READ_POLL_MS * 2 ** this.readFailures, 5000));
      }
    } finally {
      this.lodBusy = false;
      if (this.lodAgain) { this.lodAgain = false; this.lodFetch(); }
    }
  }

  /**
   * landed: a level-of-detail answer came. While a saved trace is read,
   * it shows what was read and asks again (true: nothing more to do for
   * now); the first whole answer after that ends the reading.
   */
  landed() {
    // An answer after a failed ask: its word goes.
    if (this.readFailures && this.status.textContent.startsWith("Timeline unavailable")) {
      this.status.textContent = this.status.title = "";
      delete this.status.dataset.state;
    }
    this.readFailures = 0;
    if (this.source.reading) { this.whileReading(); return true; }
    if (this.wasReading) this.readDone();
    if (this.source.passing) this.whilePassing();
    else if (this.wasPassing) this.passDone();
    return false;
  }

  /**
   * whilePassing: the view is whole (the pyramid the trace's writer
   * stored) but the server's pass over the trace goes on, and the
   * objects, scopes and findings the view has asked for wait for it: say
   * how far it has come, and ask again now and then to learn more.
   */
  whilePassing() {
    const pct = readPercent(this.source.passing);
    this.wasPassing = true;
    this.status.textContent = this.status.title = `Reading the trace for its objects and findings: ${pct}%`;
    this.status.dataset.state = "reading";
    this.askAgain(PASS_POLL_MS);
  }

  passDone() {
    this.wasPassing = false;
    // Its own words only: not an error said since.
    if (this.status.dataset.state !== "reading" || !this.status.textContent.startsWith("Reading the trace for its objects")) return;
    this.status.textContent = this.status.title = "";
    delete this.status.dataset.state;
  }

  /** askAgain asks for the view's level of detail again in ms, whatever is held (a saved trace being read). */
  askAgain(ms) {
    clearTimeout(this.readTimer);
    if (this.destroyed) return; // an answer that landed after destroy
    this.readTimer = setTimeout(() => { this.have = null; this.lodFetch(); }, ms);
  }

  /**
   * whileReading shows the part of a saved trace the server has read so
   * far (TraceSource's partial answers), all of it unless the user moved
   * the view, says how far the reading has come, and asks again shortly.
   * Objects, scopes and findings come once the trace is whole.
   */
  whileReading() {
    const r = this.source.reading, pct = readPercent(r);
    this.wasReading = true;
    this.status.textContent = this.status.title = `Reading the trace: ${pct}% (${r.events.toLocaleString()} events so far)`;
    this.status.dataset.state = "reading";
    if (!this.moved && this.source.end() > 0) {
      // As fitNow, without asking again at once: the next poll does.
      this.view = { t0: 0, t1: Math.max(this.source.end() * 1.02, 1e6) };
      this.setAxis();
    }
    this.schedule();
    this.askAgain(READ_POLL_MS);
  }

  /**
   * readDone: the trace is whole; fit it (idle stretches found now), or,
   * where the user moved the view meanwhile, keep their view and find the
   * idle stretches alone; and ask for its objects, scopes and findings.
   */
  readDone() {
    this.wasReading = false;
    this.status.textContent = this.status.title = "";
    delete this.status.dataset.state;
    if (this.moved) { this.fitted = true; this.updateIdle(); } // else lodFetch fits it
    this.refresh();
  }

  async slowFetch() {
    // While a saved trace is read, its objects and scopes wait for the
    // whole of it: ask once it is (readDone), not on every poll.
    if (this.source.reading) return;
    this.lastSlow = performance.now();
    this.allocations.follow(); // open, it counts the new window
    const { t0, t1 } = this.view, gen = ++this.gen;
    // The view moved on: the asks for the one before are cancelled, so
    // that their answers take neither a connection nor a parse.
    this.slowAbort?.abort();
    const abort = this.slowAbort = new AbortController();
    try {
      const [o, s] = await Promise.all([this.source.objects(t0, t1, OBJECTS_N, abort.signal), this.source.scopes(t0, t1, undefined, abort.signal)]);
      if (gen !== this.gen) return; // a later view's answer is on its way: an earlier one must not land after it
      this.objects = o.objects;
      this.objEnd = o.end;
      this.restack();
      this.scopes = s.scopes; this.marks = s.marks;
      // The latest cell's start: follow-live shows its whole run.
      const cellWas = this.cellStart;
      for (const sc of s.scopes) if (sc.kind === "cell" && !(sc.begin <= this.cellStart)) this.cellStart = sc.begin;
      // Learnt after the cell's last events (the answer can come later):
      // follow again, or the view keeps the cell before.
      if (this.cellStart !== cellWas && this.follow && this.source.live) { this.toEnd(); return; }
      if (this.pending) {
        // A finding jumped here: select its object, so that Enter opens it.
        const f = this.pending, o = this.objects.find((o) => o.alloc_time === f.alloc_time_ns && o.size === f.size && (o.label || "") === (f.label || ""));
        if (o) { this.pending = null; this.select(o); }
      }
      this.schedule();
    } catch (e) {
      if (e.name === "AbortError") return; // a later view's ask replaced this one
      this.status.textContent = `Objects unavailable: ${e.message}`;
    }
  }

  // --- drawing ------------------------------------------------------------

  schedule() {
    if (this.raf) return;
    this.raf = requestAnimationFrame(() => { this.raf = 0; this.draw(); });
  }

  draw() {
    const start = performance.now();
    const { ctx, W, H } = this;
    ctx.clearRect(0, 0, W, H);
    this.laneLabels = [];
    this.drawAxis();
    this.drawScopes();
    this.drawMemory();
    this.drawAllocs();
    drawHostLane(this);
    drawServiceLanes(this);
    this.drawObjects();
    this.drawBreaks();
    this.relabel();
    this.segments.drawInstant(ctx); // the allocator panel's instant, its slider's cursor
    if (this.box) {
      ctx.fillStyle = "rgba(0,119,187,0.15)";
      ctx.fillRect(Math.min(this.box.x0, this.box.x1), 0, Math.abs(this.box.x1 - this.box.x0), H);
    }
    const done = performance.now();
    this.frames.push(done - start);
    if (!this.firstPaint && this.fitted && this.buckets.length) this.firstPaint = done; // first meaningful paint, of the whole trace
    if (!this.firstPartialPaint && this.buckets.length) this.firstPartialPaint = done; // of what was read of it, or the whole
    if (this.frames.length > 600) this.frames.splice(0, 300);
  }

  drawAxis() {
    const { ctx, W } = this;
    ctx.fillStyle = "#333"; ctx.strokeStyle = "#ccc"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    ctx.beginPath();
    this.ticks = this.axis.ticks((s) => ctx.measureText(s).width + 2);
    const breaks = this.axis.visible();
    for (const { t, label } of this.ticks) {
      const x = Math.round(this.x(t)) + 0.5;
      ctx.moveTo(x, AXIS - 5); ctx.lineTo(x, this.H);
      // A break's label (in the DOM, over the axis row) has the room about it.
      const w = ctx.measureText(label).width;
      if (x + 2 + w <= W && !breaks.some((b) => x + 2 + w > (b.x0 + b.x1) / 2 - 60 && x < (b.x0 + b.x1) / 2 + 60)) ctx.fillText(label, x + 2, 3);
    }
    ctx.globalAlpha = 0.4; ctx.stroke(); ctx.globalAlpha = 1;
  }

  /** laneLabel writes a lane's title at (x, y) in the current font and colour, noted for relabel. */
  laneLabel(text, x, y) {
    this.ctx.fillText(text, x, y);
    this.laneLabels?.push({ text, x, y, font: this.ctx.font });
  }

  /** relabel writes again, over a light box, the lane titles an idle break was drawn over: they stay readable. */
  relabel() {
    const { ctx } = this, breaks = this.axis.visible();
    if (!breaks.length) return;
    ctx.textBaseline = "top"; ctx.textAlign = "start";
    for (const l of this.laneLabels || []) {
      ctx.font = l.font;
      const w = ctx.measureText(l.text).width;
      if (!breaks.some((b) => b.x0 < l.x + w + 2 && b.x1 > l.x - 2)) continue;
      ctx.fillStyle = "rgba(255,255,255,0.9)"; ctx.fillRect(l.x - 2, l.y - 1, w + 4, 13);
      ctx.fillStyle = "#333"; ctx.fillText(l.text, l.x, l.y);
    }
  }

  /** drawBreaks draws each idle break as a hatched band with zig-zag edges, and labels it (DOM, so it can be read and found). */
  drawBreaks() {
    const { ctx, H } = this, breaks = this.axis.visible();
    for (const b of breaks) {
      const x0 = Math.max(b.x0, -2), x1 = Math.min(b.x1, this.W + 2);
      ctx.fillStyle = "#fff"; ctx.fillRect(x0, AXIS - 2, x1 - x0, H - AXIS + 2);
      ctx.fillStyle = hatch(ctx, false); ctx.globalAlpha = 0.35; ctx.fillRect(x0, AXIS - 2, x1 - x0, H - AXIS + 2); ctx.globalAlpha = 1;
      ctx.strokeStyle = "#555"; ctx.lineWidth = 1.2; ctx.beginPath();
      for (const x of [x0 + 1.5, x1 - 1.5]) {
        ctx.moveTo(x, AXIS - 2);
        for (let y = AXIS - 2, i = 0; y < H; y += 6, i++) ctx.lineTo(x + (i % 2 ? -3 : 3), y + 6);
      }
      ctx.stroke(); ctx.lineWidth = 1;
    }
    const key = breaks.map((b) => `${Math.round(b.x0)}:${b.t1 - b.t0}`).join();
    if (key === this.breakKey) return;
    this.breakKey = key;
    this.breakLabels.replaceChildren(...breaks.map((b) => {
      const e = el("span", { class: "lt-break", "data-testid": "timeline-break", title: `No events from ${duration(b.t0)} to ${duration(b.t1)}` }, idleLabel(b.t1 - b.t0));
      e.style.left = `${Math.min(Math.max((b.x0 + b.x1) / 2, 70), this.W - 70)}px`; // whole, even at an edge
      return e;
    }));
  }

  drawScopes() {
    const { ctx } = this, y0 = this.tracks.scopes;
    ctx.font = "10px system-ui, sans-serif"; ctx.textBaseline = "middle";
    for (const s of this.scopes) {
      const row = SCOPE_KINDS.indexOf(s.kind);
      if (row < 0) continue;
      const x0 = Math.max(this.x(s.begin), -1), x1 = Math.min(this.x(s.end >= 0 ? s.end : this.source.end()), this.W + 1);
      if (x1 < 0 || x0 > this.W) continue;
      const y = y0 + row * SCOPE_ROW;
      ctx.fillStyle = SCOPE_COLOURS[s.kind]; ctx.fillRect(x0, y + 1, Math.max(1, x1 - x0), SCOPE_ROW - 2);
      ctx.strokeStyle = "#777"; ctx.strokeRect(x0 + 0.5, y + 1.5, Math.max(1, x1 - x0 - 1), SCOPE_ROW - 3);
      if (x1 - x0 > 40) { ctx.fillStyle = "#222"; ctx.fillText(this.scopeText(s), Math.max(x0, 0) + 3, y + SCOPE_ROW / 2, x1 - Math.max(x0, 0) - 6); }
    }
    for (const m of this.marks) {
      const x = this.x(m.time);
      if (x < -5 || x > this.W + 5) continue;
      ctx.fillStyle = m.oom ? "#000" : "#0077BB";
      ctx.beginPath(); ctx.moveTo(x - 4, y0); ctx.lineTo(x + 4, y0); ctx.lineTo(x, y0 + 7); ctx.fill();
      if (m.oom) { ctx.fillStyle = "#000"; ctx.fillText("OOM", x + 5, y0 + 4); }
    }
  }

  /** scopeText is a scope's name: a cell as the user sees it ("In [3], cell 4"), others by their label. */
  scopeText(s) {
    if (s.kind === "cell") return this.names.cell(s.label, s.count);
    return s.count ? `${s.label || s.kind} ${s.count}` : s.label || s.kind; // a service's "sample 12"
  }

  /** memScale is the top of the memory track's scale: the largest value in the view's columns. (The compare view shares one scale between two views.) */
  memScale() {
    let ymax = 1;
    const hidden = this.hidden, { n, nc, cat } = this.columns(), fold = this.folds();
    const shown = [];
    for (let c = 1; c < nc; c++) if (!hidden.has(c)) shown.push(c);
    for (let i = 0; i < n; i++) {
      let sum = 0;
      for (const c of shown) if (cat[i * nc + c]) sum += this.catValue(i, c, fold);
      ymax = Math.max(ymax, sum); // the Go heap has its own lane
    }
    // The tracks sum every category: with some hidden they are not drawn.
    if (!hidden.size) {
      for (const k of ["allocated", "reserved", "device_used"]) {
        for (let i = 0; i < n; i++) { const v = this.trackValue(i, k, fold); if (v === v) ymax = Math.max(ymax, v); }
      }
    }
    return ymax;
  }

  /**
   * folds is what the chart folds out of the weights: the least they hold
   * in view once loaded (0: nothing folded), when the display choice is
   * on (unless the person turned it off) and the weights are not hidden.
   * Loaded is a level the weights keep (a value of a fiftieth of the
   * view's columns, three at least), not a column of their loading. A
   * baseline, not each column's weights: weights that grow (an engine made
   * again without closing the first) are drawn above it.
   */
  folds() {
    if (!this.foldWeights || this.hidden.has(WEIGHTS)) return 0;
    const { n } = this.columns(), seen = new Map(), need = Math.max(3, Math.ceil(n / 50));
    let least = Infinity;
    for (let i = 0; i < n; i++) {
      const w = this.catValue(i, WEIGHTS, 0);
      if (!(w > 0)) continue;
      const k = (seen.get(w) || 0) + 1;
      seen.set(w, k);
      if (k >= need) least = Math.min(least, w);
    }
    return least < Infinity ? least : 0;
  }

  /** catValue is category c's bytes in column i, less the baseline's, and for the weights less fold (what folds answered). */
  catValue(i, c, fold) {
    const { nc, cat } = this.columns(), raw = cat[i * nc + c];
    const v = raw ? this.memValue(raw, this.baseline?.category[c]) : 0;
    return c === WEIGHTS && fold ? v - Math.min(v, fold) : v;
  }

  /** trackValue is track k's value in column i (NaN: none), less the baseline's, and less the weights folded out there. */
  trackValue(i, k, fold) {
    const v = this.columns().lines[k][i];
    if (v !== v) return v;
    const w = this.memValue(v, this.baseline?.[k]);
    return fold ? Math.max(0, w - Math.min(this.catValue(i, WEIGHTS, 0), fold)) : w;
  }

  /** columns are the buckets binned into the view's pixel columns (columns.js), made again when the buckets, the axis or the width change. */
  columns() {
    const c = this.cols;
    if (c && c.buckets === this.buckets && c.axis === this.axis && c.W === this.W) return c.cols;
    const cols = columns(this.buckets, (t) => this.x(t), this.W);
    this.cols = { buckets: this.buckets, axis: this.axis, W: this.W, cols };
    return cols;
  }

  /** memValue is v less the baseline's (not below 0) when a baseline is set. */
  memValue(v, base) { return base === undefined ? v : Math.max(0, v - base); }

  /** displayChanged redraws after a display choice (legend.js): categories, scale, baseline. */
  displayChanged() { this.restack(); this.schedule(); }

  /** restack stacks the objects of the categories shown. */
  restack() {
    const shown = this.objects.filter((o) => !this.hidden.has(CATEGORIES.indexOf(o.category)));
    this.objHeight = Math.max(1, stack(shown, this.objEnd ?? this.source.end()));
  }

  /** cursorTime is the time last pointed at on the chart, else the middle of the view. */
  cursorTime() { return this.cursorT ?? this.t(this.W / 2); }

  /** setBaseline subtracts what was alive at t from the memory chart (null: none). */
  async setBaseline(t) {
    if (t === null) { this.baseline = null; showBaseline(this); this.displayChanged(); return; }
    const b = baselineAt(await this.source.lod(0, Math.max(t, 1), 1), t);
    this.baseline = b;
    showBaseline(this);
    this.displayChanged();
  }

  drawMemory() {
    const { ctx } = this, top = this.tracks.mem, h = this.memH;
    const ymax = this.memScale();
    this.memMax = ymax;
    const y = yOf(top, h, ymax, this.logScale), base = this.baseline, hidden = this.hidden;
    ctx.fillStyle = "#fafafa"; ctx.fillRect(0, top, this.W, h);
    // Stacked areas of each category's maximum per pixel column
    // (columns.js): one outline per run of columns, so at most ten fills
    // of simple outlines however many buckets.
    const { n, nc, cat } = this.columns(), fold = this.folds();
    const under = new Float64Array(n), upper = new Float64Array(n), lower = new Float64Array(n);
    for (let c = 1; c < CATEGORIES.length; c++) {
      if (hidden.has(c)) continue;
      for (let i = 0; i < n; i++) {
        const v = cat[i * nc + c] ? this.catValue(i, c, fold) : 0;
        if (v) { lower[i] = y(under[i]); upper[i] = y(under[i] + v); under[i] += v; } else { upper[i] = Infinity; lower[i] = 0; }
      }
      ctx.beginPath();
      if (areaPath(ctx, n, upper, lower)) { ctx.fillStyle = CATEGORY_COLOURS[c]; ctx.fill(); }
    }
    for (const tr of TRACKS) {
      if (hidden.size) break; // totals of every category: not drawn while some are hidden
      if (tr.key === "go_heap") continue; // drawn in the host lane
      const pts = linePath(n, (i) => this.trackValue(i, tr.key, fold), y);
      if (!pts.length) continue;
      ctx.beginPath();
      pts.forEach(([px, py], i) => (i ? ctx.lineTo(px, py) : ctx.moveTo(px, py)));
      ctx.setLineDash(tr.dash); ctx.strokeStyle = tr.colour; ctx.lineWidth = 1.5; ctx.stroke();
    }
    ctx.setLineDash([]); ctx.lineWidth = 1;
    // The scale's labels, right-aligned: 0, half, top, or the log scale's powers.
    ctx.font = "10px system-ui, sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle"; ctx.strokeStyle = "#bbb";
    this.yLabels = [];
    for (const k of yTicks(ymax, this.logScale)) {
      const yy = Math.min(Math.max(y(k.v), top + 6), top + h - 6);
      ctx.beginPath(); ctx.moveTo(this.W - 4, Math.round(y(k.v)) + 0.5); ctx.lineTo(this.W, Math.round(y(k.v)) + 0.5); ctx.stroke();
      ctx.fillStyle = "rgba(250,250,250,0.8)"; ctx.fillRect(this.W - 6 - ctx.measureText(k.label).width - 2, yy - 6, ctx.measureText(k.label).width + 4, 12);
      ctx.fillStyle = "#333"; ctx.fillText(k.label, this.W - 6, yy);
      this.yLabels.push(k.label);
    }
    ctx.textAlign = "start";
    if (base) {
      const bx = this.x(base.t);
      ctx.strokeStyle = "#0077BB"; ctx.setLineDash([4, 3]); ctx.beginPath(); ctx.moveTo(Math.round(bx) + 0.5, top); ctx.lineTo(Math.round(bx) + 0.5, top + h); ctx.stroke(); ctx.setLineDash([]);
    }
    ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    const what = (base ? `growth since ${duration(base.t)}` : "memory") + (fold ? " above the weights" : "");
    const hid = hidden.size ? `, ${hidden.size} hidden` : "";
    const folded = fold ? `; weights ${bytes(fold)} folded out` : "";
    this.memLabel = `${what} (max ${bytes(ymax)}${this.logScale ? ", log scale" : ""}${hid}${folded})`;
    this.laneLabel(this.memLabel, 4, top + 2);
  }

  /**
   * drawAllocs draws the allocation rate, a column's allocations over the
   * time it spans: churn (a mask made and freed each chunk) that the
   * memory chart, which is what is alive at once, never shows (issue 26).
   */
  drawAllocs() {
    const { ctx } = this, top = this.tracks.allocs, h = ALLOC_H, { n, allocs } = this.columns();
    ctx.fillStyle = "#fafafa"; ctx.fillRect(0, top, this.W, h);
    const rate = new Float64Array(n);
    let most = 0, total = 0;
    for (let i = 0; i < n; i++) {
      if (!allocs[i]) continue;
      total += allocs[i];
      const dt = this.t(i + 1) - this.t(i);
      if (dt > 0) { rate[i] = (allocs[i] / dt) * 1e9; most = Math.max(most, rate[i]); }
    }
    if (most > 0) {
      ctx.fillStyle = "#666"; ctx.beginPath();
      for (let i = 0; i < n; i++) if (rate[i]) { const bh = Math.max(1, ((h - 13) * rate[i]) / most); ctx.rect(i, top + h - bh, 1, bh); }
      ctx.fill();
    }
    this.allocsLabel = most > 0 ? `allocations: ${Math.round(total).toLocaleString("en-US")} in view, up to ${perSecond(most)} a second` : "allocations: none in view";
    ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    this.laneLabel(this.allocsLabel, 4, top + 1);
  }

  drawObjects() {
    const { ctx } = this, top = this.tracks.obj, h = this.tracks.objH;
    ctx.fillStyle = "#fcfcfc"; ctx.fillRect(0, top, this.W, h);
    const scale = (h - 14) / this.objHeight, end = this.objEnd ?? this.source.end();
    const bottom = top + h, ceil = top + 14;
    this.hits = [];
    const lingering = [];
    for (const o of this.objects) {
      if (this.hidden.has(CATEGORIES.indexOf(o.category))) continue;
      const x0 = this.x(o.alloc_time), x1 = this.x(o.free_time >= 0 ? o.free_time : end);
      let y1 = bottom - o.y * scale, y0 = y1 - Math.max(1, o.size * scale);
      if (o.lingering && y1 - y0 < LINGER_H) {
        // Grown about its middle, kept inside the track.
        const mid = Math.min(Math.max((y0 + y1) / 2, ceil + LINGER_H / 2), bottom - LINGER_H / 2);
        y0 = mid - LINGER_H / 2; y1 = mid + LINGER_H / 2;
      }
      const r = { o, x0: Math.max(x0, -2), x1: Math.min(Math.max(x1, x0 + (o.lingering ? 3 : 1)), this.W + 2), y0, y1, grown: o.lingering && o.size * scale < LINGER_H };
      this.hits.push(r);
      if (o.lingering) { lingering.push(r); continue; }
      ctx.globalAlpha = 0.75;
      // A watched service's blocks are its sites: one colour each.
      ctx.fillStyle = this.report?.service ? SITE_COLOURS[(o.site_id || 0) % SITE_COLOURS.length] : CATEGORY_COLOURS[CATEGORIES.indexOf(o.category)] || "#999";
      ctx.fillRect(r.x0, y0, r.x1 - r.x0, y1 - y0);
      ctx.globalAlpha = 1;
    }
    // Lingering objects last, on top: hit testing goes from the last drawn,
    // so the band a person sees is the one a click gets.
    this.hits = this.hits.filter((r) => !r.o.lingering).concat(lingering);
    // Small lingering objects side by side would be grown into one band:
    // from the top down, move each below those it overlaps.
    lingering.sort((a, b) => a.y0 - b.y0);
    for (let i = 0; i < lingering.length; i++) {
      const r = lingering[i];
      for (let j = 0; r.grown && j < i; j++) {
        const q = lingering[j];
        if (q.x0 < r.x1 && r.x0 < q.x1 && q.y0 < r.y1 && r.y0 < q.y1 && q.y1 + 1 + LINGER_H <= bottom) {
          r.y0 = q.y1 + 1; r.y1 = r.y0 + LINGER_H; j = -1; // look again from the first
        }
      }
    }
    this.badges = [];
    for (const r of lingering) this.drawLingering(r);
    const sel = this.selected && this.hits.find((r) => r.o.seq === this.selected.seq);
    if (sel) {
      ctx.strokeStyle = "#fff"; ctx.lineWidth = 5; ctx.strokeRect(sel.x0 - 2, sel.y0 - 2, sel.x1 - sel.x0 + 4, sel.y1 - sel.y0 + 4);
      ctx.strokeStyle = "#0077BB"; ctx.lineWidth = 2.5; ctx.strokeRect(sel.x0 - 2, sel.y0 - 2, sel.x1 - sel.x0 + 4, sel.y1 - sel.y0 + 4); ctx.lineWidth = 1;
    }
    ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top";
    // While the server's pass goes on (whilePassing) the objects are owed, not none.
    const label = this.wasPassing && !this.objects.length ? "objects: once the trace is read" : `objects: the ${this.objects.length} largest in view${lingering.length ? `, ${lingering.length} lingering` : ""}`;
    this.laneLabel(label, 4, top + 2);
    this.objectsLabel = label;
  }

  // A late free is a diagonal hatch ending in a bar at its free, badged
  // with a triangle; a leak a cross-hatch that runs off the right end as an
  // arrow, badged with ∞ in a circle: told apart by shape, not only hue.
  drawLingering({ o, x0, x1, y0, y1 }) {
    const { ctx } = this, h = y1 - y0, leak = o.leak;
    ctx.beginPath();
    if (leak) {
      const tip = Math.min(h / 2, 6);
      ctx.moveTo(x0, y0); ctx.lineTo(x1 - tip, y0); ctx.lineTo(x1, (y0 + y1) / 2); ctx.lineTo(x1 - tip, y1); ctx.lineTo(x0, y1); ctx.closePath();
    } else ctx.rect(x0, y0, x1 - x0, h);
    ctx.fillStyle = LINGERING; ctx.fill();
    ctx.fillStyle = hatch(ctx, leak); ctx.fill();
    ctx.strokeStyle = "#000"; ctx.lineWidth = 1.5; ctx.stroke();
    if (!leak) { ctx.fillStyle = "#000"; ctx.fillRect(x1 - 3, y0 - 2, 3, h + 4); }
    ctx.lineWidth = 1;
    // One badge where several bands end together: the bands' ends (arrow
    // or bar) still tell each apart.
    const bx = Math.min(Math.max(x1 + 9, 9), this.W - 9), by = Math.max((y0 + y1) / 2, this.tracks.obj + 9);
    if (this.badges.some((b) => Math.hypot(b.x - bx, b.y - by) < 15 && b.leak === leak)) return;
    this.badges.push({ x: bx, y: by, leak });
    this.badge(leak, bx, by);
  }

  badge(leak, x, y) {
    const { ctx } = this;
    ctx.fillStyle = "#000"; ctx.strokeStyle = "#fff"; ctx.lineWidth = 1.5;
    ctx.beginPath();
    if (leak) ctx.arc(x, y, 8, 0, 2 * Math.PI);
    else { ctx.moveTo(x, y - 8); ctx.lineTo(x + 8, y + 6); ctx.lineTo(x - 8, y + 6); ctx.closePath(); }
    ctx.fill(); ctx.stroke(); ctx.lineWidth = 1;
    if (leak) {
      ctx.fillStyle = "#fff"; ctx.font = "bold 12px system-ui, sans-serif"; ctx.textAlign = "center"; ctx.textBaseline = "middle";
      ctx.fillText("∞", x, y + 0.5); ctx.textAlign = "start";
    }
  }

  // --- input --------------------------------------------------------------

  bindInput() {
    const c = this.canvas;
    const pos = (ev) => { const r = c.getBoundingClientRect(); return { x: ev.clientX - r.left, y: ev.clientY - r.top }; };
    c.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const p = pos(ev);
      if (ev.shiftKey || Math.abs(ev.deltaX) > Math.abs(ev.deltaY)) this.pan((ev.deltaX || ev.deltaY) * 0.5);
      else this.zoom(Math.exp(ev.deltaY * 0.002), p.x);
    }, { passive: false });
    c.addEventListener("pointerdown", (ev) => {
      const p = pos(ev);
      c.setPointerCapture(ev.pointerId);
      this.drag = { x: p.x, last: p.x, moved: false, box: ev.shiftKey };
      if (ev.shiftKey) this.box = { x0: p.x, x1: p.x };
    });
    c.addEventListener("pointermove", (ev) => {
      const p = pos(ev);
      if (this.drag) {
        if (Math.abs(p.x - this.drag.x) > 3) this.drag.moved = true;
        if (this.drag.box) { this.box.x1 = p.x; this.schedule(); } else { this.pan(this.drag.last - p.x); this.drag.last = p.x; }
        return;
      }
      this.cursorT = this.t(p.x);
      this.hover(p, ev);
    });
    c.addEventListener("pointerup", (ev) => {
      const d = this.drag, p = pos(ev);
      this.drag = null;
      if (d?.box) {
        const b = this.box; this.box = null;
        if (Math.abs(b.x1 - b.x0) > 4) this.setView(this.t(Math.min(b.x0, b.x1)), this.t(Math.max(b.x0, b.x1)), true);
        else this.schedule();
      } else if (d && !d.moved) this.click(p);
    });
    c.addEventListener("pointerleave", () => { this.tooltip.hidden = true; });
    c.addEventListener("dblclick", () => this.fit());
    c.addEventListener("keydown", (ev) => {
      if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
      const k = {
        ArrowLeft: () => this.pan(-this.W / 8), ArrowRight: () => this.pan(this.W / 8),
        "+": () => this.zoom(0.5), "=": () => this.zoom(0.5), "-": () => this.zoom(2), 0: () => this.fit(),
        Home: () => this.toStart(), End: () => this.toEnd(),
        f: () => this.setFollow(!this.follow),
        s: () => this.openSegments(),
        b: () => this.setBaseline(this.cursorTime()),
        ArrowDown: () => this.step(1), ArrowUp: () => this.step(-1),
        Enter: () => { if (this.selected) this.showDetail(this.selected); },
        Escape: () => { this.selected = null; this.said.textContent = ""; this.schedule(); },
      }[ev.key];
      if (k) { ev.preventDefault(); k(); }
    });
  }

  /** step selects the next (d=1) or previous (d=-1) object in view: lingering ones first, then by size. */
  step(d) {
    const order = this.objects.slice().sort((a, b) => (b.lingering - a.lingering) || (b.size - a.size) || (a.alloc_time - b.alloc_time));
    if (!order.length) { this.said.textContent = "No objects in view."; return; }
    const i = this.selected ? order.findIndex((o) => o.seq === this.selected.seq) : -1;
    this.select(order[(i < 0 ? (d > 0 ? 0 : order.length - 1) : (i + d + order.length) % order.length)]);
  }

  /** select marks o on the canvas and says what it is. */
  select(o) {
    this.selected = o;
    this.said.textContent = `${o.label || "(no label)"}: ${sizes(o.requested, o.size)} ${o.category}${o.lingering ? (o.leak ? ", leak, never freed" : ", lingering, freed late") : ""}. Enter shows its details.`;
    this.schedule();
  }

  objectAt(p) {
    // An object under the pointer wins over a neighbour within the pixel
    // of slack that thin bands need: otherwise a thin band drawn later
    // steals the clicks in the middle of the one beside it.
    const hits = this.hits || [];
    for (const slack of [0, 1]) {
      for (let i = hits.length - 1; i >= 0; i--) {
        const r = hits[i];
        if (p.x >= r.x0 - slack && p.x <= r.x1 + slack && p.y >= r.y0 - slack && p.y <= r.y1 + slack) return r.o;
      }
    }
    return null;
  }

  hover(p) {
    let html = null;
    const brk = p.y >= AXIS && this.axis.visible().find((b) => p.x >= b.x0 && p.x <= b.x1);
    if (brk) html = `${esc(idleLabel(brk.t1 - brk.t0))}<br>no events from ${duration(brk.t0)} to ${duration(brk.t1)}`;
    const o = !html && p.y >= this.tracks.obj ? this.objectAt(p) : null;
    if (html) { /* the break */ } else if (o) {
      html = `<b>${esc(o.label || "(no label)")}</b><br>${sizes(o.requested, o.size)} · ${esc(o.category)}${o.lingering ? (o.leak ? " · <b>leak</b>" : " · <b>lingering</b>") : ""}`;
      // Its stack as the detail panel shows it, outermost first as a
      // Python traceback (the line that made it last), then the first Go
      // frames below it.
      const fs = starlarkFrames(o.site), gos = o.site?.frames || [];
      if (fs.length || gos.length) {
        html += `<ol class="lt-tipstack" data-testid="tooltip-stack">${fs.map((f) => `<li>${esc(frameText(this.names, f))}</li>`).join("")}` +
          `${gos.slice(0, 3).map((f) => `<li class="lt-gof">${esc(f.func)}</li>`).join("")}${gos.length > 3 ? `<li class="lt-gof">… ${gos.length - 3} more</li>` : ""}</ol>`;
      }
    } else if (p.y >= this.tracks.mem && p.y < this.tracks.mem + this.memH) {
      // The column under the pointer, as the chart draws it (columns.js):
      // the largest values among the buckets that touch it.
      const { n, nc, cat, lines, covered } = this.columns(), i = Math.floor(p.x);
      if (i >= 0 && i < n && covered[i]) {
        const cats = [];
        for (let c = 1; c < nc; c++) if (cat[i * nc + c]) cats.push([cat[i * nc + c], c]);
        cats.sort((a, b) => b[0] - a[0]);
        const v = (k) => bytes(lines[k][i] === lines[k][i] ? lines[k][i] : 0);
        html = `${duration(this.t(i))}<br>allocated ${v("allocated")} · reserved ${v("reserved")} · device ${v("device_used")}` +
          cats.slice(0, 4).map(([v, c]) => `<br>${CATEGORIES[c]} ${bytes(v)}`).join("");
      }
    } else if (p.y >= this.tracks.scopes && p.y < this.tracks.mem) {
      const t = this.t(p.x), row = SCOPE_KINDS[Math.floor((p.y - this.tracks.scopes) / SCOPE_ROW)];
      const s = this.scopes.find((s) => s.kind === row && s.begin <= t && (s.end < 0 || t <= s.end));
      if (s) html = `${esc(s.kind === "cell" ? this.scopeText(s) : `${s.kind} ${s.label}`)}<br>${duration(s.begin)} – ${s.end >= 0 ? duration(s.end) : "open"}${s.kind === "cell" ? `<br><small>${esc(this.names.title(s.label))}</small>` : ""}`;
    }
    html ??= hostTooltip(this, p) ?? serviceTooltip(this, p);
    if (!html) { this.tooltip.hidden = true; return; }
    this.tooltip.innerHTML = html;
    this.tooltip.hidden = false;
    this.tooltip.style.left = `${Math.max(0, Math.min(p.x + 12, this.W - 340))}px`;
    // Below the pointer, or above it where it would run off the view's
    // bottom (a stack makes it tall).
    const h = this.tooltip.offsetHeight, below = p.y + 12 + h <= this.body.clientHeight;
    this.tooltip.style.top = `${below ? p.y + 12 : Math.max(0, p.y - 8 - h)}px`;
  }

  /** openSegments shows the allocator at the cursor's time, the selected object's allocation, or the end. */
  openSegments() {
    if (this.selected) this.segments.open({ time: this.selected.alloc_time }, `(${this.selected.label || "the selected object"} allocated)`);
    else if (this.cursorT !== undefined) this.segments.open({ time: this.cursorT }, "(the cursor)");
    else this.segments.open({ at: "end" }, "(the end)");
  }

  click(p) {
    // An OOM mark (its triangle at the top of the scope rows) opens the
    // allocator as it was when the allocation failed.
    const oom = p.y < this.tracks.scopes + 10 && this.marks.find((m) => m.oom && Math.abs(this.x(m.time) - p.x) <= 6);
    if (oom) { this.segments.open({ time: oom.time }, "at the OOM"); return; }
    if (p.y >= this.tracks.scopes && p.y < this.tracks.mem) {
      const t = this.t(p.x), row = SCOPE_KINDS[Math.floor((p.y - this.tracks.scopes) / SCOPE_ROW)];
      const s = this.scopes.find((s) => s.kind === row && s.begin <= t && (s.end < 0 || t <= s.end));
      // A cell's band scrolls the notebook to the cell (its label is the cell id).
      if (s?.kind === "cell") document.dispatchEvent(new CustomEvent("linger:goto-cell", { detail: { cellId: s.label } }));
      return;
    }
    const o = this.objectAt(p);
    this.selected = o;
    this.schedule();
    if (o) this.showDetail(o);
  }

  /** showDetail opens o in the detail panel (detail.js). */
  showDetail(o) { return renderDetail(this, o); }

  /**
   * openGroup opens a finding's group in the detail panel and shows its
   * whole episode: from its first object's allocation to the last one's
   * end (when it should have died, or its free, or the trace's end),
   * selecting the first so that Enter opens it.
   */
  async openGroup(g, title, end) {
    const gen = this.groupGen = (this.groupGen || 0) + 1; // a later click's jump wins
    const os = g.objects;
    if (!os.length) { this.fit(); return; }
    let t0 = Math.min(...os.map((o) => o.alloc_time_ns));
    let t1 = Math.max(...os.map((o) => o.linger_time_ns || (o.leaked ? end : (o.free_time_ns || end))), ...os.map((o) => o.alloc_time_ns));
    this.group = { title, t0, t1, first: os[0].alloc_time_ns, last: Math.max(...os.map((o) => o.alloc_time_ns)), count: g.count };
    renderGroup(this, g, title);
    // The report lists the largest objects only, often the first of a
    // growth: its shape is the run of the cells they were made in, whole
    // (a leak finding zoomed to 60 ms about its first allocation).
    try {
      const { scopes } = await this.source.scopes(t0, this.group.last + 1);
      for (const c of scopes) {
        if (c.kind !== "cell" || !(c.begin <= this.group.last) || (c.end >= 0 && c.end < t0)) continue;
        t0 = Math.min(t0, c.begin);
        t1 = Math.max(t1, c.end >= 0 ? c.end : end);
      }
    } catch { /* the objects' own span, then */ }
    if (gen !== this.groupGen || this.destroyed) return;
    this.jump(t0, t1, g.first);
  }

  /**
   * findingsSoon asks for the report in ms, or sooner: at most FINDINGS_MAX_MS
   * after the first ask not yet served, so that events that never pause
   * (a long cell, a catch-up) still get their findings.
   */
  findingsSoon(ms) {
    const now = performance.now();
    this.findingsBy ??= now + FINDINGS_MAX_MS;
    clearTimeout(this.findingsTimer);
    this.findingsTimer = setTimeout(() => { this.findingsBy = null; this.loadFindings(); }, Math.max(0, Math.min(now + ms, this.findingsBy) - now));
  }

  /**
   * findingsLag answers, for the report shown, how many events it analysed
   * and how many the trace has as far as this page knows (the stream's
   * head and what it has sent, the server's trace when it made the
   * report); null when it covers them all (a saved trace's always does).
   */
  findingsLag() {
    const r = this.report;
    if (!r || !this.source.live) return null;
    const have = r.last_seq || 0, of = Math.max(this.source.seen(), r.trace_last_seq || 0);
    return have < of ? { have, of } : null;
  }

  /**
   * checkFindings keeps the findings honest about the report's reach: while
   * it has analysed fewer events than the trace has, the panel says how
   * many (a status, read out) and shows no all-clear; once caught up, the
   * verdict. It asks again for the report while it lags.
   */
  checkFindings() {
    const lag = this.findingsLag();
    if (!!lag !== !!this.shownLag) this.renderFindings();
    this.shownLag = lag;
    if (!lag) {
      this.findingsStatus.textContent = "";
      return;
    }
    // A report that no longer advances for a trace that has ended is the
    // last there will be (its log short of the stream's head): stop asking.
    const last = this.source.state === "ended" && this.staleReports >= 5;
    // A live region: updated at most once a second, and when a report lands.
    const now = performance.now();
    if (now - (this.statusAt || 0) >= 1000 || this.statusFor !== lag.have || last) {
      this.statusAt = now;
      this.statusFor = lag.have;
      const n = `${lag.have.toLocaleString()} of ${lag.of.toLocaleString()} events`;
      this.findingsStatus.textContent = last ? `Analysed ${n}: the rest did not reach the analysis.` : `Analysing… ${n}`;
    }
    if (!last) this.findingsSoon(500);
  }

  async loadFindings() {
    // An earlier answer must not land after a later one.
    const gen = (this.findingsGen = (this.findingsGen || 0) + 1);
    let r;
    try { r = await this.source.report(); } catch (e) {
      if (gen !== this.findingsGen) return;
      this.report = null;
      this.findingsBody.replaceChildren(el("p", { class: "lt-hint" }, `Not available (${e.message}).`));
      this.checkFindings();
      return;
    }
    // Who holds the lingering objects, once per cause, from the live
    // kernel: the server groups them as linger run does.
    let holders = [];
    if (this.source.lingering && r.lingering?.leaked) {
      try { holders = (await this.source.lingering()).groups || []; } catch { /* a busy kernel: the next findings ask again */ }
    }
    if (gen !== this.findingsGen) return;
    this.staleReports = this.report && r.last_seq === this.report.last_seq ? (this.staleReports || 0) + 1 : 0;
    const newService = !!r.service && !this.report?.service;
    this.report = r;
    if (newService) {
      // A watched service: its lanes, and its samples' time as it is.
      this.idle = null; this.overview = null;
      this.resize();
      this.fit();
    } else if (r.service) this.schedule();
    this.holders = holders;
    this.shownLag = this.findingsLag();
    this.renderFindings();
    this.checkFindings();
  }

  /** renderFindings lists the findings of the report shown (this.report). */
  renderFindings() {
    const r = this.report;
    if (!r) return;
    this.names.learn(r.cells);
    const list = el("ul", {});
    // A site is shown by its first place, from its structure (the
    // report's site_table, by a row's site_id): its notebook stack, its
    // cells named as the user sees them, else its first Go frame; the
    // whole site, with the cells' ids, is its title.
    const table = new Map((r.site_table || []).map((s) => [s.id, s]));
    const short = (row) => {
      const s = table.get(row?.site_id);
      // A program's site (a PyTorch snapshot's) by its innermost user frame.
      if (s?.stack?.length && !s.stack[0].cell && s.stack[0].file) return this.names.frame(s.stack[s.stack.length - 1]);
      if (s?.stack?.length) return this.names.stack(s.stack);
      const f = s?.frames?.[0];
      if (f && !f.file && !f.line) return f.func; // a name for several places (a service's "other sites")
      return f ? `${f.func} ${f.file.split("/").slice(-2).join("/")}:${f.line}` : row?.site || "";
    };
    const item = (text, fn, title) => {
      const t = title ? { title } : {};
      const li = el("li", fn ? {} : t, fn ? el("button", { type: "button", class: "lt-finding", "data-testid": "finding", onclick: fn, ...t }, text) : text);
      list.append(li);
    };
    const end = r.duration_ns || this.source.end();
    // A watched service: its samples, limits, goroutines and failures
    // first, and its heap by site compared over the watch (service.js).
    const sites = r.service ? renderService(this, r, short, item) : null;
    // A trace without scopes (a PyTorch snapshot without steps) says
    // what the verdicts by step would need.
    if (r.needs) item(r.needs);
    // An allocation that failed first: what it asked for and where, what
    // the device's limit left free, and what was alive (the largest
    // categories); each opens the allocator as it was then.
    for (const o of r.ooms || []) {
      const alive = (o.live || []).slice(0, 4).map((c) => `${c.category} ${sizes(c.requested, c.bytes)} in ${c.count}`).join(", ");
      item(`out of memory: ${o.category}${o.label ? ` ${o.label}` : ""} ${sizes(o.requested, o.size)} asked for at ${short(o) || "unknown site"}; ${bytes(o.device_free)} free under the limit${alive ? `; alive: ${alive}` : ""}`,
        () => { this.jump(o.time_ns, o.time_ns); this.segments.open({ at: o.seq }, "at the OOM"); }, o.site);
    }
    const moreOOMs = (r.anomalies?.ooms || 0) - (r.ooms || []).length;
    if (moreOOMs > 0) item(`… and ${moreOOMs} more out-of-memory errors`);
    // Lingering objects are listed by (leak or late free, category, site):
    // one line per place in the code, as a user fixes them, not one per
    // block (a leaked KV cache is two blocks per layer). The totals are the
    // report's per-site ones (exact); each line jumps to the group's first
    // listed object (the report lists the first ones only).
    const groups = new Map();
    // Bytes are those requested first, the allocator's blocks beside them.
    const group = (leaked, category, row) => {
      const where = short(row), key = `${leaked}\0${category}\0${where}`;
      let g = groups.get(key);
      if (!g) groups.set(key, (g = { leaked, category, site: row.site, site_id: row.site_id, where, first: null, objects: [], count: 0, bytes: 0, requested: 0, labels: new Set() }));
      return g;
    };
    for (const t of r.lingering?.by_site || []) {
      if (t.leaked) { const g = group(true, t.category, t); g.count += t.leaked; g.bytes += t.leaked_bytes; g.requested += t.leaked_requested || 0; }
      if (t.late_frees) { const g = group(false, t.category, t); g.count += t.late_frees; g.bytes += t.late_free_bytes; g.requested += t.late_free_requested || 0; }
    }
    for (const o of r.lingering?.objects || []) {
      const g = group(o.leaked, o.category, o);
      if (!g.count) { g.count = 1; g.bytes = o.size; g.requested = o.requested || 0; } // a report without per-site totals
      g.first ??= o;
      g.objects.push(o);
      if (g.labels.size < 4 && o.label) g.labels.add(o.label);
    }
    const ranked = [...groups.values()].sort((a, b) => (b.requested || b.bytes) - (a.requested || a.bytes));
    for (const g of ranked.slice(0, 50)) {
      const o = g.first;
      // The category always shows: a label alone ("layer.0.k") does not
      // say that it is a KV cache.
      const labels = [...g.labels];
      const what = g.count === 1 ? `${labels[0] ? ` ${labels[0]}` : ""} ${sizes(g.requested, g.bytes)}` :
        ` ${sizes(g.requested, g.bytes)} in ${g.count} objects${labels.length ? ` (${labels.join(", ")}${g.count > labels.length ? ", …" : ""})` : ""}`;
      const text = `${g.leaked ? "∞ leak" : "▲ lingering"}: ${g.category}${what} (${g.where || "unknown site"})`;
      // Opens the group and shows its whole episode: from its first
      // allocation to when the last should have died (its scope's end).
      item(text, o ? () => this.openGroup(g, text, end) : () => toSite(this, table, g), g.site);
    }
    if (ranked.length > 50) item(`… and ${ranked.length - 50} more places (${sizes(r.lingering.requested, r.lingering.bytes)} lingered in all)`);
    // Who holds them, once per cause (the objects of one list are one
    // line), from the live kernel: the server groups them as linger run
    // does; each line jumps to the first of its objects the report lists.
    if (this.source.lingering && r.lingering?.leaked) {
      const groups = this.holders || [];
      for (const g of groups.slice(0, 10)) {
        const o = (r.lingering.objects || []).find((o) => o.leaked && g.addrs?.includes(o.addr));
        item(`held by ${holderGroup(g)}`, o ? () => this.jump(o.alloc_time_ns, o.linger_time_ns || end, o) : null, g.example);
      }
      if (groups.length > 10) item(`… held by ${groups.length - 10} more`);
    }
    // Growth per step (the finest scopes: the engine's prefill chunks and
    // decode steps), and per request and per cell, which a notebook
    // counts, where it grows at their ends too.
    for (const g of r.growth || []) {
      const per = (g.per || []).map((p) => `, ${rate(p.requested_per, p.bytes_per, p.unit)} over ${p.samples} ${p.unit}s`).join("");
      const unit = r.service ? "sample" : g.unit || r.growth_unit || "step"; // a service's steps are its samples
      item(`growth: ${g.category}${g.site ? ` at ${short(g)}` : ""} ${rate(g.requested_per_step, g.bytes_per_step, unit)} over ${g.samples} ${unit}s${per}`, () => toSite(this, table, g), g.site);
    }
    // Which track grows tells which kind of growth it is (two-track
    // monitoring): the analyzer's verdict over the whole trace.
    const verdicts = {
      allocated_grows: "allocated grows: live objects accumulate (a true leak when they linger)",
      reserved_grows: "reserved grows, allocated does not: the cache keeps freed memory (empty_cache releases it)",
      device_grows: "device used grows, reserved does not: memory taken outside the allocator",
      go_heap_grows: "the Go heap grows while the device is flat: a host-memory leak",
    };
    // And over each cell run whose tracks grow (a notebook's phases, each
    // its own kind of growth, which the whole trace's one verdict misses);
    // the whole trace's verdict when no phase says it.
    // A growing Go heap names the lines whose host buffers hold it
    // (host_sites) and leads to the first, its lane and its growth.
    const phases = r.tracks?.phases || [];
    const line = (h) => { const st = table.get(h.site_id)?.stack; return st?.length ? this.names.frame(st[st.length - 1]) : short(h); };
    const held = (hs) => (hs?.length ? `; held by host buffers made at ${hs.map((h) => `${line(h)} (${bytes(h.bytes)} alive)`).join(", ")}` : "");
    if (verdicts[r.tracks?.verdict] && !phases.some((p) => p.verdict === r.tracks.verdict)) item(`tracks: ${verdicts[r.tracks.verdict]}${held(r.tracks.host_sites)}`, () => toTracks(this, table, r));
    const growing = { allocated_grows: ["allocated", "allocated_per_step"], reserved_grows: ["reserved", "reserved_per_step"], device_grows: ["device used", "device_used_per_step"], go_heap_grows: ["Go heap", "go_heap_per_step"] };
    for (const p of phases) {
      const [track, key] = growing[p.verdict] || [];
      if (!track) continue;
      const by = p[key] > 0 ? ` (${track} +${bytes(p[key])}/${p.unit} over ${p.samples} ${p.unit}s)` : "";
      item(`tracks in ${this.names.cell(p.cell)}: ${verdicts[p.verdict]}${by}${held(p.host_sites)}`,
        p.host_sites?.length ? () => toHost(this, table, p.host_sites, p.begin_ns, p.end_ns) : () => this.jump(p.begin_ns, p.end_ns), this.names.title(p.cell));
    }
    // A duplicates family: the same thing (a mask) built again and again,
    // or copies alive at once; the label tells families of one site apart.
    for (const d of r.duplicates || []) {
      const size = sizeRange(d.min_requested, d.max_requested, d.min_size, d.max_size);
      const live = d.max_live > 1 ? `, up to ${d.max_live} alive at once` : "";
      // Opens the allocations by line over the whole run, its row marked.
      item(`duplicates: ${d.category}${d.label ? ` ${d.label}` : ""} ${d.count} × ${size}; ${sizes(d.total_requested, d.total_bytes)} in all${live}; one buffer would save ${sizes(d.saved_requested, d.saved_bytes)} at ${short(d)}`,
        () => { this.setFollow(false, true); this.fit(); this.allocations.open(undefined, undefined, { site_id: d.site_id, category: d.category }); }, d.site);
    }
    // The peak is the allocated track's highest point (a track value);
    // beside it, what the objects alive then asked for, first.
    if (r.peak?.bytes) {
      item(`peak: ${sizes(r.peak.requested, r.peak.bytes)} at ${duration(r.peak.time_ns)}`, () => this.jump(r.peak.time_ns, r.peak.time_ns));
      item("the allocator at the peak: segments and free space", () => this.segments.open({ at: "peak" }));
    }
    // The all-clear only for the whole trace: a report behind the trace
    // has not seen what may yet linger, grow or repeat (checkFindings).
    if (!list.children.length && !this.findingsLag()) item("Nothing lingers, grows or repeats.");
    // The kernel's memory budget (linger serve --kernel-memory): a cell
    // over it stops with MemoryError, marked on the timeline.
    if (r.memory_budget) item(`memory budget: ${bytes(r.memory_budget)} for the kernel's Go heap and cpu tensors together`);
    this.findingsBody.replaceChildren(list, ...(sites ? [sites] : []));
  }

  destroy() {
    this.destroyed = true; clearTimeout(this.findingsTimer); clearTimeout(this.readTimer); this.slowAbort?.abort();
    this.life.abort(); this.allocations.close();
    this.unsub(); this.source.close(); this.root.replaceChildren();
  }
}

function esc(s) { return String(s ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`); }

let styled = false;


function injectStyle() {
  if (styled) return;
  styled = true;
  // Layout only, scoped to lt-; colours come from the page's stylesheet where it sets them.
  document.head.append(el("style", {}, `
.lt-toolbar{display:flex;flex-wrap:wrap;gap:.35em;align-items:center;padding:.25em 0;font:13px system-ui,sans-serif}
.lt-btn{min-width:2em}
.lt-menu{position:relative}
.lt-menu>summary{list-style:none;cursor:pointer;display:inline-block}
.lt-menu>summary::-webkit-details-marker{display:none}
.lt-menu>summary::after{content:" ▾"}
.lt-menu-body{position:absolute;z-index:20;top:calc(100% + 2px);left:0;display:flex;flex-direction:column;align-items:stretch;gap:.3em;padding:.4em;min-width:14em;background:#fff;border:1px solid #888;border-radius:3px;box-shadow:0 2px 8px rgba(0,0,0,.2)}
.lt-menu-body .lt-btn{text-align:left}
.lt-menu-body .lt-exports{display:flex;flex-direction:column;gap:.25em;white-space:nowrap}
.lt-toggle[aria-pressed=true]{background:#dde7f5;font-weight:600}
.lt-toggle[aria-pressed=true]::before{content:"✓ "}
.lt-status{margin-left:auto;flex:1 1 3em;min-width:3em;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;text-align:right}
.lt-status[data-state=reading]{width:auto}
.lt-body{position:relative;min-height:420px;margin:6px 0;overflow:clip;overflow-clip-margin:8px}
@media (max-height:899px){.lt-body{min-height:380px}}
.lt-toolbar .lt-btn{padding:3px 7px}
[data-testid=timeline]{container-type:inline-size}
@container (max-width:620px){.lt-toolbar{font-size:12px;gap:.3em}.lt-toolbar .lt-btn{padding:2px 5px}.lt-status{min-width:2.5em}}
.lt-canvas{display:block;touch-action:none;cursor:crosshair}
.lt-tooltip{position:absolute;pointer-events:none;background:#fff;border:1px solid #888;padding:.3em .5em;font:12px system-ui,sans-serif;max-width:340px;box-shadow:0 1px 4px rgba(0,0,0,.2)}
.lt-tipstack{margin:.3em 0 0;padding-left:1.2em}
.lt-tipstack .lt-gof{color:#555;overflow-wrap:anywhere}
.lt-go summary{cursor:pointer}
.lt-group{list-style:none;padding:0;margin:0}
.lt-h3{font-size:13px;margin:.6em 0 .2em}
.lt-sr{position:absolute;width:1px;height:1px;margin:0;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
.lt-legend{display:flex;flex-wrap:wrap;gap:.25em .5em;font:12px system-ui,sans-serif;padding:.25em 0}
.lt-key i{display:inline-block;width:12px;height:12px;margin-right:.3em;vertical-align:middle}
.lt-key i.lt-line{height:0;border-top:2px solid;width:16px}
.lt-key i.lt-linger{width:18px;background:repeating-linear-gradient(45deg,#D55E00 0 3px,#000 3px 4.5px);border:1px solid #000;border-right-width:3px}
.lt-key i.lt-leak{width:18px;background:repeating-linear-gradient(45deg,transparent 0 3px,#000 3px 4.5px),repeating-linear-gradient(-45deg,#D55E00 0 3px,#000 3px 4.5px);clip-path:polygon(0 0,65% 0,100% 50%,65% 100%,0 100%)}
.lt-panels{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,24em),1fr));gap:1em;font:13px system-ui,sans-serif}
.lt-detail dl{display:grid;grid-template-columns:auto minmax(0,1fr);gap:.2em .8em}
.lt-detail dd{margin:0;min-width:0;overflow-wrap:anywhere}
.lt-stack{margin:0;padding-left:1.4em}
.lt-detail code{display:block;white-space:pre-wrap;overflow-wrap:anywhere}
.lt-findings li{overflow-wrap:anywhere}
.lt-findings ul{list-style:none;padding:0;margin:0}
.lt-finding{background:none;border:0;padding:.15em 0;text-align:left;cursor:pointer;font:inherit;color:inherit;text-decoration:underline}
.lt-hint{color:#555}
.lt-breaks{position:absolute;left:0;top:0;width:100%;height:0;pointer-events:none}
.lt-break{position:absolute;top:2px;transform:translateX(-50%);white-space:nowrap;font:11px system-ui,sans-serif;color:#222;background:#fff;padding:0 .3em;border:1px solid #999;border-radius:2px}
button.lt-key{font:inherit;color:inherit;background:#fff;border:1px solid #bbb;border-radius:3px;padding:0 .3em;cursor:pointer}
button.lt-key:hover{border-color:#555}
button.lt-key[aria-pressed=true]::before{content:"✓";display:inline-block;width:1em;font-weight:600}
button.lt-key[aria-pressed=false]::before{content:"";display:inline-block;width:1em}
.lt-legend-hint{color:#555;margin-right:.3em}
button.lt-key[aria-pressed=false]{text-decoration:line-through;color:#555}
button.lt-key[aria-pressed=false] i{opacity:.25;outline:1px solid #555}
.lt-baseline{font-weight:600}
.lt-btn[aria-expanded=true]::before{content:"▾ "}
.lt-btn[aria-expanded=false]::before{content:"▸ "}
.lt-h{font-size:15px;margin:.8em 0 .4em}
.lt-sites{border-collapse:collapse;margin-top:.6em;font:12px system-ui,sans-serif;width:100%}
.lt-sites caption{text-align:left;font-weight:600;padding:.2em 0}
.lt-sites th,.lt-sites td{padding:.15em .4em;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}
.lt-sites th:first-child,.lt-sites td:first-child{text-align:left;white-space:normal;overflow-wrap:anywhere}
`));
}
