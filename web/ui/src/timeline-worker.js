// Entry of the timeline's Web Worker (static/timeline-worker.js): it holds
// a live timeline's websocket so that the page's main thread only gets
// decoded messages. Text messages are parsed here; binary events frames
// become typed-array columns (timeline/streamcodec.js: times made absolute,
// the 64-bit fields' halves joined into Numbers here) whose buffers are transferred,
// not copied. The protocol with the page (timeline/stream.js):
//
//	page → worker: {op:"open", id, url} | {op:"send", id, data} | {op:"close", id}
//	worker → page: {ev:"ready"} once loaded | {id, ev:"open"} | {id, ev:"message", m} | {id, ev:"close", code}
import { decodeFrame, buffers } from "./timeline/streamcodec.js";

const sockets = new Map(); // id → WebSocket

self.onmessage = ({ data: c }) => {
  switch (c.op) {
    case "open": {
      const ws = new WebSocket(c.url);
      ws.binaryType = "arraybuffer";
      sockets.set(c.id, ws);
      ws.onopen = () => self.postMessage({ id: c.id, ev: "open" });
      ws.onclose = (e) => { sockets.delete(c.id); self.postMessage({ id: c.id, ev: "close", code: e.code }); };
      ws.onmessage = (e) => {
        if (typeof e.data === "string") { self.postMessage({ id: c.id, ev: "message", m: JSON.parse(e.data) }); return; }
        let cols;
        try { cols = decodeFrame(e.data); } catch (err) { self.postMessage({ id: c.id, ev: "message", m: { type: "error", message: err.message } }); return; }
        // at: when the frame reached the worker (wall clock, for measurements).
        self.postMessage({ id: c.id, ev: "message", m: { type: "events", cols, at: Date.now() } }, buffers(cols));
      };
      break;
    }
    case "send": {
      const ws = sockets.get(c.id);
      if (ws?.readyState === WebSocket.OPEN) ws.send(c.data);
      break;
    }
    case "close":
      sockets.get(c.id)?.close();
      break;
  }
};

self.postMessage({ ev: "ready" });
