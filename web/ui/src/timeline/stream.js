// StreamSocket: a live timeline's websocket, held by a Web Worker
// (timeline-worker.js) that parses and decodes what arrives, so that the
// page's main thread gets each message ready to use: a text message as its
// parsed JSON, a binary events frame as {type: "events", cols} with the
// columns of streamcodec.js. Where the worker cannot start (or fails to
// load), the socket runs on the main thread with the same decoder.
//
// It looks like a WebSocket to its user: url, readyState, send, close,
// and onopen / onmessage(m) / onclose({code}).

import { decodeFrame } from "./streamcodec.js";

let worker = null, workerFailed = false, nextId = 1;
const sockets = new Map(); // id → StreamSocket using the worker

function sharedWorker() {
  if (worker || workerFailed) return worker;
  try {
    // Beside the bundle that holds this module (static/timeline.js).
    worker = new Worker(new URL("./timeline-worker.js", import.meta.url), { type: "module" });
  } catch {
    workerFailed = true;
    return null;
  }
  let loaded = false;
  worker.onmessage = ({ data: r }) => {
    if (r.ev === "ready") loaded = true;
    else sockets.get(r.id)?.event(r);
  };
  worker.onerror = (e) => {
    // Once loaded, an error is the worker's own (it goes on); before, the
    // worker did not load: its sockets move to this thread.
    if (loaded) { console.warn(`timeline: worker: ${e.message}`); return; }
    e.preventDefault();
    workerFailed = true;
    worker = null;
    for (const s of [...sockets.values()]) s.fallBack();
  };
  return worker;
}

export class StreamSocket {
  constructor(url) {
    this.url = url;
    this.readyState = WebSocket.CONNECTING;
    this.onopen = this.onmessage = this.onclose = null;
    this.id = nextId++;
    this.worker = typeof Worker === "undefined" ? null : sharedWorker();
    if (this.worker) {
      sockets.set(this.id, this);
      this.worker.postMessage({ op: "open", id: this.id, url });
    } else this.direct();
  }

  // direct opens the websocket on this thread.
  direct() {
    this.worker = null;
    const ws = new WebSocket(this.url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onopen = () => this.event({ ev: "open" });
    ws.onclose = (e) => this.event({ ev: "close", code: e.code });
    ws.onmessage = (e) => {
      let m;
      if (typeof e.data === "string") m = JSON.parse(e.data);
      else try { m = { type: "events", cols: decodeFrame(e.data) }; } catch (err) { m = { type: "error", message: err.message }; }
      this.event({ ev: "message", m });
    };
  }

  // fallBack: the worker died; a socket still connecting starts again here,
  // an open one is closed (its user reconnects).
  fallBack() {
    sockets.delete(this.id);
    if (this.readyState === WebSocket.CONNECTING) this.direct();
    else this.event({ ev: "close", code: 1006 });
  }

  event(r) {
    if (this.readyState === WebSocket.CLOSED) return;
    switch (r.ev) {
      case "open":
        if (this.readyState === WebSocket.CONNECTING) this.readyState = WebSocket.OPEN;
        this.onopen?.();
        break;
      case "message":
        this.onmessage?.(r.m);
        break;
      case "close":
        this.readyState = WebSocket.CLOSED;
        sockets.delete(this.id);
        this.onclose?.({ code: r.code });
        break;
    }
  }

  send(data) {
    if (this.readyState !== WebSocket.OPEN) return;
    if (this.ws) this.ws.send(data);
    else this.worker.postMessage({ op: "send", id: this.id, data });
  }

  close() {
    if (this.readyState >= WebSocket.CLOSING) return;
    this.readyState = WebSocket.CLOSING;
    if (this.ws) this.ws.close();
    else this.worker.postMessage({ op: "close", id: this.id });
  }
}
