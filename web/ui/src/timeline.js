// Entry of the timeline: fills every [data-testid="timeline"] container.
//
// A saved trace's page gives the routes' prefix in data-trace-url
// ({base}api/timeline/traces/{name}). The notebook page's dock gives
// data-notebook-path and learns its kernel from the notebook's
// linger:kernel event (or data-kernel-id): the stream and routes are then
// {base}api/timeline/kernels/{id}/…. See docs/timeline.md.
import { TimelineView } from "./timeline/view.js";
import { TraceSource, KernelSource } from "./timeline/source.js";

const base = document.body.dataset.base || "/";

function kernelSource(id) {
  const prefix = `${base}api/timeline/kernels/${encodeURIComponent(id)}`;
  const ws = `${location.protocol === "https:" ? "wss:" : "ws:"}//${location.host}${prefix}/stream`;
  return new KernelSource(prefix, ws, `${base}api/kernels/${encodeURIComponent(id)}/lingering`);
}

const views = new Map(); // container → view

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
    views.set(root, new TimelineView(root, seeded(new TraceSource(root.dataset.traceUrl))));
  } else if (root.dataset.kernelId) {
    views.set(root, new TimelineView(root, kernelSource(root.dataset.kernelId)));
    root.dataset.mountedKernel = root.dataset.kernelId;
  } else {
    root.textContent = "The timeline appears when the kernel is connected.";
  }
}

for (const root of document.querySelectorAll('[data-testid="timeline"]')) mount(root);

document.addEventListener("linger:kernel", (ev) => {
  const id = ev.detail?.kernelId;
  for (const root of document.querySelectorAll('[data-testid="timeline"]')) {
    if (root.dataset.traceUrl || root.dataset.mountedKernel === id) continue;
    views.get(root)?.destroy();
    root.dataset.kernelId = id;
    mount(root);
  }
});

// For tests and the browser console: window.linger.timeline.views, and
// each view's firstPaint (performance.now()) and frames (draw times, ms).
window.linger = Object.assign(window.linger || {}, { timeline: { views } });
