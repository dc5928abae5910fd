// Where the timeline's data comes from. A TraceSource answers from the
// server's level-of-detail routes for a saved trace; a KernelSource follows
// a live kernel over the timeline websocket (resuming from the last
// sequence number after a drop, so no event is missed or repeated) into a
// local Pyramid, and asks the server for objects and scopes.
// Routes and messages: docs/timeline.md, docs/timeline-stream.md.

import { Pyramid } from "./pyramid.js";
import { KIND } from "./wire.gen.js";
import { LineStats } from "./lines.js";
import { StreamSocket } from "./stream.js";
import { eventAt } from "./streamcodec.js";
import { decodeLOD } from "./lodcodec.js";

async function get(url, accept, signal) {
  const res = await fetch(url, { credentials: "same-origin", headers: { Accept: accept }, signal });
  if (!res.ok) {
    let msg = res.statusText;
    try { msg = (await res.json()).message || msg; } catch { /* not JSON */ }
    throw new Error(`${res.status} ${msg}`);
  }
  return res;
}

async function getJSON(url, signal) { return (await get(url, "application/json", signal)).json(); }

// MAX_LINE_QUEUE bounds the live events kept for line statistics while
// older ones are owed; past it they count out of order.
const NOTIFY_MS = 16, ACK_MS = 10, MAX_LINE_QUEUE = 1 << 20, WINDOW = 1 << 18;

const q = (o) => new URLSearchParams(Object.fromEntries(Object.entries(o).map(([k, v]) => [k, String(Math.round(v))]))).toString();

class Source {
  /** prefix is the routes' common URL: {base}api/timeline/kernels/{id} or …/traces/{name}. */
  constructor(prefix) {
    this.prefix = prefix.replace(/\/$/, "");
    this.listeners = new Set();
  }
  onChange(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }
  changed(what) { for (const fn of this.listeners) fn(what); }
  /** objects and scopes of [t0, t1); signal (an AbortSignal) cancels the ask, as a view that moved on does. */
  objects(t0, t1, n, signal) { return getJSON(`${this.prefix}/objects?${q({ t0, t1: Math.max(t1, t0 + 1), n })}`, signal); }
  scopes(t0, t1, n = 2000, signal) { return getJSON(`${this.prefix}/scopes?${q({ t0, t1: Math.max(t1, t0 + 1), n })}`, signal); }
  /** report is the findings alone (sites=0): not every site's totals, which the page does not show. */
  report() { return getJSON(`${this.prefix}/report?sites=0`); }
  /** seen is the last sequence number of the trace this source knows of (0: none yet, or a saved trace, whose report is whole). */
  seen() { return 0; }
  exportURL(format) { return `${this.prefix}/export?format=${encodeURIComponent(format)}`; }
  close() {}
}

export class TraceSource extends Source {
  /**
   * partial: ask for the part of the trace the server has read so far
   * while its pass goes on (…/lod?partial=1), so that a large trace's view
   * fills in rather than stays empty; reading then says how far it has
   * come ({read_bytes, file_bytes, events}), and is false once the trace
   * is whole (null: not asked yet). passing is {read_bytes, file_bytes}
   * while the answers are whole (the pyramid the trace's writer stored)
   * but the server's pass, which objects, scopes and findings wait for,
   * goes on; else null.
   */
  constructor(prefix, { partial = false } = {}) {
    super(prefix);
    this.live = false;
    this.endTime = 0;
    this.partial = partial;
    this.reading = null;
    this.passing = null;
  }
  /** lod is the buckets of [t0, t1) at about px pixels: the binary answer (lodcodec.js), no JSON to parse. */
  async lod(t0, t1, px) {
    const part = this.partial && this.reading !== false ? "&partial=1" : "";
    const res = await get(`${this.prefix}/lod?${q({ t0, t1: t1 > t0 ? t1 : 0, px })}&format=bin${part}`, "application/octet-stream");
    const r = decodeLOD(await res.arrayBuffer());
    // Once whole, always whole: a partial answer that comes late (asked
    // before the pass ended) is asked again, whole.
    if (this.reading === false && r.reading) return this.lod(t0, t1, px);
    this.endTime = r.end;
    this.reading = r.reading ? { ...r.reading, events: r.events } : (this.partial ? false : null);
    this.passing = r.passing || null;
    return r.buckets;
  }
  end() { return this.endTime; }
  /** Who held each object lingering at the trace's end, as the kernel recorded it in the trace ({holders, groups}, as a live kernel answers). */
  lingering() { return getJSON(`${this.prefix}/lingering`); }
}

export class KernelSource extends Source {
  /**
   * wsURL is the stream route as a ws: or wss: URL, without ?from;
   * lingeringURL the kernel's "who holds each lingering object" route.
   */
  constructor(prefix, wsURL, lingeringURL) {
    super(prefix);
    this.lingeringURL = lingeringURL;
    this.live = true;
    this.wsURL = wsURL;
    this.pyramid = new Pyramid();
    this.lines = new LineStats();
    this.next = 1; // the next live sequence number wanted
    this.head = 0; // the trace's last event as the server last said (start, end)
    this.skipped = 0; // events the view has as a summary only, their detail owed
    this.summaries = 0; // catch-up summaries received
    this.state = "connecting"; // connecting | live | behind | ended | disconnected
    this.retry = 250;
    this.closed = false;
    this.lastEventAt = 0; // performance.now() of the last events message
    // Trace time the view may lag before it gets a summary instead (and
    // the events later). At 50 ms the page's first second (its first
    // frames and queries, before the JIT has settled: long tasks of 50
    // to 100 ms) held the server's live frames back 0.3 to 0.7 s behind
    // summaries and their backfill; at 150 ms, the p99 goal, about 0.13 s.
    this.maxDelayMs = 150;
    this.connect();
  }

  /** The stream's URL, resuming where the view is: its next event and the ranges it holds only as summaries. */
  streamURL() {
    // max_delay_ms: a view more than this much trace time behind gets a
    // summary and jumps ahead rather than lag; backfill=1: the summarised
    // events follow, oldest first, as it catches up (docs/timeline-stream.md).
    // window: events in flight before the server waits for acks; the
    // path from socket through the Worker to this thread holds more than
    // the server's default at a million events a second.
    let u = `${this.wsURL}?from=${this.next}&max_delay_ms=${this.maxDelayMs}&format=binary&backfill=1&window=${WINDOW}`;
    const owed = this.pyramid.owed();
    if (owed.length) u += `&gaps=${owed.map(([a, b]) => `${a}-${b}`).join(",")}`;
    return u;
  }

  connect() {
    if (this.closed) return;
    const ws = new StreamSocket(this.streamURL());
    this.ws = ws;
    this.handled = 0; // events handled on this connection, for acks
    ws.onopen = () => {
      this.retry = 250;
      // Acknowledge what has been handled, so that the server keeps only a
      // window of events in flight and summarises the rest.
      clearInterval(this.ackTimer);
      this.ackTimer = setInterval(() => this.ack(), 50);
    };
    ws.onmessage = (m) => { if (ws === this.ws) this.message(m); };
    ws.onclose = () => {
      if (ws !== this.ws) return;
      clearInterval(this.ackTimer);
      if (this.closed || this.state === "ended") return;
      this.setState("disconnected");
      setTimeout(() => this.connect(), this.retry);
      this.retry = Math.min(this.retry * 2, 5000);
    };
  }

  /** message handles one stream message, parsed (a text message) or decoded (events: m.cols). */
  message(m) {
    switch (m.type) {
      case "start":
        this.head = Math.max(this.head, m.head || 0);
        this.setState(m.head > m.from + 100000 ? "behind" : "live");
        break;
      case "defs":
        for (const [id, s] of m.strings) this.pyramid.defineString(id, s);
        this.lines.defs(m);
        break;
      case "events": {
        const c = m.cols;
        if (!c || !c.n) break;
        if (c.backfill) {
          // The detail of a range the view has as a summary, oldest first.
          if (!this.pyramid.addPast(c)) {
            console.warn(`timeline: backfill from ${c.first}, owed ${JSON.stringify(this.pyramid.owed().slice(0, 2))}`);
            break;
          }
          this.skipped -= c.n;
          this.lineEvents(c, false);
        } else {
          if (c.first !== this.next) {
            // Never expected: the server resumes exactly at ?from.
            console.warn(`timeline: events from ${c.first}, expected ${this.next}`);
          }
          this.pyramid.addColumns(c);
          this.lineEvents(c, this.skipped > 0);
          this.next = c.first + c.n;
        }
        this.handled += c.n;
        this.lastEventAt = performance.now();
        this.setState(this.skipped > 0 ? "behind" : "live");
        this.ack();
        this.notify();
        break;
      }
      case "catchup":
        this.summaries++;
        this.pyramid.addSummary(m);
        if (m.backfill) this.skipped += m.to - m.from + 1;
        this.next = m.to + 1;
        this.setState("behind");
        this.notify();
        break;
      case "error":
        console.warn(`timeline: ${m.message}`);
        break;
      case "end":
        this.head = Math.max(this.head, m.last || 0);
        this.setState("ended", m.reason);
        this.ws.close();
        break;
    }
  }

  // lineEvents feeds line statistics, which need events in order: live
  // events that come while older ones are owed wait (queued) for them.
  // Only where there is a notebook to annotate.
  lineEvents(c, queue) {
    if (!window.linger?.notebook) return;
    const q = this.lineQueue || (this.lineQueue = []);
    const { kind } = c;
    for (let i = 0; i < c.n; i++) {
      const k = kind[i];
      if (k !== KIND.alloc && k !== KIND.free && k !== KIND.scopeBegin && k !== KIND.scopeEnd && k !== KIND.counter) continue;
      if (queue && q.length < MAX_LINE_QUEUE) q.push(eventAt(c, i));
      else this.lines.add(eventAt(c, i));
    }
    // What was queued goes once nothing older is owed.
    const owed = this.pyramid.owed(), limit = owed.length ? owed[0][0] : Infinity;
    let j = 0;
    while (j < q.length && q[j][0] < limit) this.lines.add(q[j++]);
    if (j) q.splice(0, j);
    if (!this.linesTimer) this.linesTimer = setTimeout(() => { this.linesTimer = 0; this.lines.flush(); }, 250);
  }

  // ack tells the server how many events this connection has handled; at
  // most every ACK_MS, for the server waits on it once Window events are
  // in flight (a million events a second fill its default in 65 ms).
  ack() {
    const now = performance.now();
    if (now - (this.acked || 0) < ACK_MS) return;
    this.acked = now;
    this.ws.send(JSON.stringify({ type: "ack", seq: this.next - 1, events: this.handled }));
  }

  // notify tells the view of new events at once, then at most once a
  // frame (NOTIFY_MS): each notice costs it a query of the pyramid, and a
  // million events a second arrive in hundreds of messages.
  notify() {
    const wait = (this.notified || -Infinity) + NOTIFY_MS - performance.now();
    if (wait <= 0) {
      this.notified = performance.now();
      this.changed("events");
    } else if (!this.notifyTimer) {
      this.notifyTimer = setTimeout(() => { this.notifyTimer = 0; this.notify(); }, wait);
    }
  }

  setState(s, detail) {
    if (s === this.state && !detail) return;
    this.state = s;
    this.stateDetail = detail || "";
    this.changed("state");
  }

  async lod(t0, t1, px) { return this.pyramid.query(t0, t1, px); }
  end() { return this.pyramid.end(); }
  // What the stream has told of: the head it started at or ended with, and
  // every event or summary since (a summary's events count as seen).
  seen() { return Math.max(this.head, this.next - 1); }
  lingering() { return getJSON(this.lingeringURL); }
  close() { this.closed = true; clearInterval(this.ackTimer); clearTimeout(this.notifyTimer); this.ws?.close(); }
}
