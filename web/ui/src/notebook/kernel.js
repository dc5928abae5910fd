// A small Jupyter kernel client over the server's websocket, in the legacy
// JSON framing (one JSON message per text frame, with a "channel" field).
//
// One KernelClient per page. It reconnects with exponential backoff when
// the socket drops, and reports every change of state through onState, so
// the page can show a banner. Executions are matched to replies by the
// request's msg_id; iopub messages without a known parent (another client's,
// or update_display_data) go to onIOPub.

import { base, newID, kernels } from "./api.js";

const MAX_BACKOFF_MS = 30000;

/**
 * States reported through onState: "connecting", "idle", "busy",
 * "starting", "restarting", "disconnected" (socket dropped, reconnecting),
 * "dead" (the kernel died or is gone; only a restart helps).
 */
export class KernelClient {
  constructor(kernelId, { onState, onIOPub }) {
    this.kernelId = kernelId;
    this.session = newID(16);
    this.onState = onState;
    this.onIOPub = onIOPub;
    this.pending = new Map(); // msg_id → execution handlers
    this.requests = new Map(); // msg_id → {resolve, reject, timer} of other shell requests
    this.backoff = 1000;
    this.ws = null;
    this.closed = false;
    this.state = "connecting";
    this.timer = 0;
  }

  setState(s, detail) {
    this.state = s;
    this.onState(s, detail);
  }

  /** Opens the websocket; safe to call again after a drop. */
  connect() {
    clearTimeout(this.timer);
    if (this.ws) {
      this.ws.onclose = null;
      this.ws.close();
    }
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${proto}//${location.host}${base}api/kernels/${encodeURIComponent(this.kernelId)}/channels?session_id=${this.session}`;
    this.setState("connecting");
    const ws = new WebSocket(url);
    this.ws = ws;
    ws.onopen = () => {
      this.backoff = 1000;
      // Asks for the current state; the iopub status that answers it sets
      // the indicator.
      this.send("shell", "kernel_info_request", {});
    };
    ws.onmessage = (ev) => {
      let m;
      try {
        m = JSON.parse(ev.data);
      } catch {
        return; // not the legacy framing: nothing this client can read
      }
      this.dispatch(m);
    };
    ws.onclose = () => {
      if (this.ws !== ws || this.closed) return;
      this.failPending("the connection to the kernel was lost");
      this.reconnectLater();
    };
  }

  async reconnectLater() {
    // A kernel that is gone will not come back by reconnecting.
    try {
      const k = await kernels.get(this.kernelId);
      if (k && k.execution_state === "dead") {
        this.setState("dead", "The kernel died.");
        return;
      }
    } catch (e) {
      if (e.status === 404) {
        this.setState("dead", "The kernel is gone.");
        return;
      }
    }
    const wait = this.backoff;
    this.backoff = Math.min(this.backoff * 2, MAX_BACKOFF_MS);
    this.setState("disconnected", `Connection lost; reconnecting in ${Math.round(wait / 1000)} s…`);
    this.timer = setTimeout(() => this.connect(), wait);
  }

  /** Stops reconnecting and closes the socket; executions still waiting fail with why. */
  close(why = "the connection to the kernel was closed") {
    this.closed = true;
    clearTimeout(this.timer);
    this.failPending(why);
    if (this.ws) this.ws.close();
  }

  send(channel, msgType, content, metadata = {}) {
    const msgId = newID(16);
    const m = {
      header: { msg_id: msgId, username: "linger", session: this.session, date: new Date().toISOString(), msg_type: msgType, version: "5.3" },
      parent_header: {},
      metadata,
      content,
      channel,
      buffers: [],
    };
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) throw new Error("not connected to the kernel");
    this.ws.send(JSON.stringify(m));
    return msgId;
  }

  /**
   * Runs code. handlers.onOutput(msg) gets every iopub message of the
   * execution but status; the returned promise resolves with the
   * execute_reply content once the reply has come and the kernel is idle
   * again, or rejects when the connection drops first. As JupyterLab does,
   * the request's metadata carries the cell's id (handlers.cellId): the
   * kernel names the cell in the site of every allocation the code makes,
   * which is how the timeline finds a cell and its lines; and its place
   * in the notebook (handlers.position, 1-based), which the trace keeps to
   * name the cell as the page does.
   */
  execute(code, handlers) {
    const msgId = this.send("shell", "execute_request", {
      code,
      silent: false,
      store_history: true,
      user_expressions: {},
      allow_stdin: false,
      stop_on_error: true,
    }, handlers.cellId ? { cellId: handlers.cellId, ...(handlers.position ? { lingerCellPosition: handlers.position } : {}) } : {});
    return new Promise((resolve, reject) => {
      this.pending.set(msgId, { ...handlers, resolve, reject, reply: null, idle: false });
      handlers.onStart?.(msgId);
    });
  }

  /**
   * Sends a shell request that is answered by one reply (complete_request,
   * inspect_request) and resolves with the reply's content; rejects when
   * the connection drops first or no reply comes within timeoutMs.
   */
  request(msgType, content, timeoutMs = 30000) {
    return new Promise((resolve, reject) => {
      const msgId = this.send("shell", msgType, content);
      const timer = setTimeout(() => {
        this.requests.delete(msgId);
        reject(new Error(`no ${msgType.replace("_request", "_reply")} in ${timeoutMs / 1000} s`));
      }, timeoutMs);
      this.requests.set(msgId, { resolve, reject, timer });
    });
  }

  failPending(why) {
    for (const [, p] of this.pending) p.reject(new Error(why));
    this.pending.clear();
    for (const [, r] of this.requests) {
      clearTimeout(r.timer);
      r.reject(new Error(why));
    }
    this.requests.clear();
  }

  dispatch(m) {
    const type = m.header?.msg_type || m.msg_type;
    const parent = m.parent_header?.msg_id;
    const p = parent && this.pending.get(parent);
    if (m.channel === "iopub" && type === "status") {
      const s = m.content.execution_state;
      this.setState(s, s === "dead" ? "The kernel died." : undefined);
      if (s === "dead") this.failPending("the kernel died");
      if (p && s === "idle") {
        p.idle = true;
        this.settle(parent, p);
      }
      return;
    }
    if (m.channel === "shell" && type === "execute_reply" && p) {
      p.reply = m.content;
      this.settle(parent, p);
      return;
    }
    const r = m.channel === "shell" && parent && this.requests.get(parent);
    if (r) {
      this.requests.delete(parent);
      clearTimeout(r.timer);
      r.resolve(m.content || {});
      return;
    }
    if (m.channel === "iopub") {
      if (p && type !== "update_display_data") p.onOutput?.(m);
      else this.onIOPub?.(m);
    }
  }

  settle(id, p) {
    if (p.reply && p.idle) {
      this.pending.delete(id);
      p.resolve(p.reply);
    }
  }
}
