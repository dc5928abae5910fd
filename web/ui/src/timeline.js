// Entry of the timeline: fills every [data-testid="timeline"] container.
//
// A saved trace's page gives the routes' prefix in data-trace-url
// ({base}api/timeline/traces/{name}); a live source's (a watched service,
// a probe) in data-live-url ({base}api/timeline/sources/{id}), followed
// over its stream as a kernel's is. The notebook page's dock gives
// data-notebook-path and learns its kernel from the notebook's
// linger:kernel event (or data-kernel-id): the stream and routes are then
// {base}api/timeline/kernels/{id}/…. See docs/timeline.md.
//
// A kernel keeps its id across restarts, but each process writes a trace
// of its own (the kernel model's "trace", and "traces" all of them): the
// dock follows the current one, switching when the notebook says the
// kernel restarted (linger:kernel with restarted) or when its stream ends
// and the kernel model names a newer trace. The runs this page has seen
// before are a select in the dock's toolbar ("Previous run"), each opening
// as a saved trace or compared with the current one.
import { TimelineView } from "./timeline/view.js";
import { TraceSource, KernelSource } from "./timeline/source.js";

const base = document.body.dataset.base || "/";

function kernelSource(id) {
  const prefix = `${base}api/timeline/kernels/${encodeURIComponent(id)}`;
  return new KernelSource(prefix, streamURL(prefix), `${base}api/kernels/${encodeURIComponent(id)}/lingering`);
}

function streamURL(prefix) {
  return `${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}${prefix}/stream`;
}

const views = new Map(); // container → view

// The traces of this page's kernels, oldest first, the current one last:
// every run of every kernel the page has followed (a restart adds one, so
// does a change of kernel).
const runs = [];

function seen(names) {
  for (const n of names || []) if (n && !runs.includes(n)) runs.push(n);
}

async function kernelModel(id) {
  const res = await fetch(`${base}api/kernels/${encodeURIComponent(id)}`, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!res.ok) throw new Error(`${res.status}`);
  return res.json();
}

let runsIds = 0;

// showRuns puts the Previous run select in the view's toolbar: the runs
// before current, newest first, with links to open one saved and to
// compare it with the current run.
function showRuns(root, view, current) {
  view.runsEl?.remove();
  const prev = runs.filter((n) => n !== current).reverse();
  if (!prev.length) return;
  const id = `lt-previous-${++runsIds}`;
  const box = document.createElement("span");
  box.className = "lt-runs";
  box.dataset.testid = "timeline-runs";
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = "Previous run ";
  const sel = document.createElement("select");
  sel.id = id;
  sel.dataset.testid = "timeline-previous";
  for (const n of prev) sel.append(new Option(n, n));
  const open = document.createElement("a");
  open.className = "lt-link";
  open.dataset.testid = "timeline-previous-open";
  open.target = "_blank";
  open.rel = "noopener";
  const cmp = open.cloneNode();
  cmp.dataset.testid = "timeline-previous-compare";
  const update = () => {
    const n = sel.value;
    open.href = `${base}timeline/${encodeURIComponent(n)}`;
    open.textContent = "Open";
    open.setAttribute("aria-label", `Open the previous run ${n}`);
    cmp.href = `${base}compare?a=${encodeURIComponent(n)}&b=${encodeURIComponent(current)}`;
    cmp.textContent = "Compare";
    cmp.setAttribute("aria-label", `Compare ${n} with the current run`);
  };
  sel.addEventListener("change", update);
  update();
  box.append(label, sel, " ", open, " ", cmp);
  view.runsEl = box;
  view.toolbar?.append(box);
}

// follow learns the kernel's current trace (and its earlier ones) and
// shows the previous runs; once the view's stream ends while the kernel
// lives on (restarted by another client, or after its death), it waits
// for the new process's trace and switches to it.
async function follow(root, view, id) {
  let m;
  try { m = await kernelModel(id); } catch { return; }
  if (views.get(root) !== view) return;
  seen(m.traces);
  if (m.trace) root.dataset.trace = m.trace;
  showRuns(root, view, m.trace);
  const unsub = view.source.onChange((what) => {
    if (what !== "state" || view.source.state !== "ended") return;
    unsub();
    awaitNewRun(root, view, id, m.trace);
  });
}

async function awaitNewRun(root, view, id, was) {
  for (let i = 0; i < 60 && views.get(root) === view; i++) {
    let m;
    try { m = await kernelModel(id); } catch { return; } // gone: the trace stays ended
    if (m.trace && m.trace !== was && m.execution_state !== "restarting" && m.execution_state !== "dead") {
      if (views.get(root) === view) remount(root, id);
      return;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

function remount(root, id) {
  views.get(root)?.destroy();
  views.delete(root);
  root.dataset.kernelId = id;
  delete root.dataset.trace;
  mount(root);
}

// A saved trace's page may inline the first level-of-detail answer over
// the whole trace (script#timeline-overview, the body of …/lod?px=1024):
// the source's first answer is then that one, and the first paint needs
// no round trip. Later answers come from the server as before.
function seeded(source) {
  const el = document.getElementById("timeline-overview");
  let seed = null;
  try { seed = el && JSON.parse(el.textContent); } catch { /* ask the server */ }
  if (!seed?.buckets) return source;
  const lod = source.lod.bind(source);
  source.lod = async (t0, t1, px) => {
    if (!seed) return lod(t0, t1, px);
    const s = seed;
    seed = null;
    source.endTime = s.end;
    return s.buckets;
  };
  return source;
}

function mount(root) {
  if (root.dataset.traceUrl) {
    views.set(root, new TimelineView(root, seeded(new TraceSource(root.dataset.traceUrl, { partial: true }))));
  } else if (root.dataset.liveUrl) {
    const prefix = root.dataset.liveUrl;
    views.set(root, new TimelineView(root, new KernelSource(prefix, streamURL(prefix), `${prefix}/lingering`)));
  } else if (root.dataset.kernelId) {
    const view = new TimelineView(root, kernelSource(root.dataset.kernelId));
    views.set(root, view);
    root.dataset.mountedKernel = root.dataset.kernelId;
    follow(root, view, root.dataset.kernelId);
  } else {
    root.textContent = "The timeline appears when the kernel is connected.";
  }
}

for (const root of document.querySelectorAll('[data-testid="timeline"]')) mount(root);

// A kernel connected (restarted: true after a restart, with the new
// process's trace): follow it, unless this is the run already followed.
document.addEventListener("linger:kernel", (ev) => {
  const { kernelId: id, restarted, trace } = ev.detail || {};
  for (const root of document.querySelectorAll('[data-testid="timeline"]')) {
    if (root.dataset.traceUrl || root.dataset.liveUrl) continue;
    if (root.dataset.mountedKernel === id && (!restarted || (trace && trace === root.dataset.trace))) continue;
    remount(root, id);
  }
});

// For tests and the browser console: window.linger.timeline.views, and
// each view's firstPaint (performance.now()) and frames (draw times, ms).
window.linger = Object.assign(window.linger || {}, { timeline: { views, runs } });
