// Drives a running `linger serve` with the real Jupyter client library,
// @jupyterlab/services, the way JupyterLab itself talks to a server: the
// REST API for contents, checkpoints, sessions and kernels, and the kernel
// websocket for the messaging protocol.
//
// The server is started by jupyter_test.go, which passes:
//
//	LINGER_URL        the URL the server printed, http://127.0.0.1:PORT/?token=...
//	LINGER_TOKEN      the token (optional when LINGER_URL carries it)
//	LINGER_WS_FRAMING "v1" (default): offer the v1.kernel.websocket.jupyter.org
//	                  binary subprotocol, as @jupyterlab/services 7 does;
//	                  "legacy": offer no subprotocol, so the server must fall
//	                  back to the JSON text framing older clients use.
//
// Every step is a subtest named after the protocol step it checks, so a
// failure says which part of the protocol broke; a step whose prerequisite
// failed is skipped with the name of that prerequisite (the run still fails
// on the first failure).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import {
  ContentsManager,
  KernelAPI,
  KernelManager,
  KernelMessage,
  KernelSpecAPI,
  ServerConnection,
  SessionAPI,
  SessionManager
} from '@jupyterlab/services';

const V1 = 'v1.kernel.websocket.jupyter.org';
const FRAMING = process.env.LINGER_WS_FRAMING || 'v1';
const STEP_TIMEOUT = Number(process.env.LINGER_STEP_TIMEOUT_MS || 20000);
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const NB_PATH = 'e2e.ipynb';

if (FRAMING !== 'v1' && FRAMING !== 'legacy') {
  throw new Error(`LINGER_WS_FRAMING must be "v1" or "legacy", not ${JSON.stringify(FRAMING)}`);
}
if (!process.env.LINGER_URL) {
  throw new Error('LINGER_URL is not set: run this through `go test ./test/jupyter/` (or `make test`), which starts `linger serve`');
}

// The library logs every websocket it opens with console.debug; the test's
// own output is what matters.
console.debug = () => {};

const serverURL = new URL(process.env.LINGER_URL);
const token = process.env.LINGER_TOKEN || serverURL.searchParams.get('token') || '';
const baseUrl = `${serverURL.origin}/`;

// Every socket the library opens, so the test can assert what the server
// negotiated and which frame types it sent.
const sockets = [];

class RecordingWebSocket extends WebSocket {
  constructor(url, protocols, options) {
    super(url, protocols, options);
    this.offered = Array.isArray(protocols) ? [...protocols] : protocols ? [protocols] : [];
    this.frames = { text: 0, binary: 0 };
    this.on('message', (_data, isBinary) => {
      this.frames[isBinary ? 'binary' : 'text']++;
    });
    sockets.push(this);
  }
}

// A client that predates the v1 subprotocol: it offers none, whatever the
// library asks for, so the server must use the legacy JSON framing.
class LegacyWebSocket extends RecordingWebSocket {
  constructor(url, _protocols, options) {
    super(url, [], options);
  }
}

// The last messages received, shown when a step fails so the failure says
// what the server actually sent.
const recent = [];
const clientErrors = [];
const defaults = ServerConnection.makeSettings();
const serializer = {
  serialize: defaults.serializer.serialize,
  deserialize(data, protocol) {
    let m;
    try {
      m = defaults.serializer.deserialize(data, protocol);
    } catch (err) {
      clientErrors.push(`undecodable websocket frame (protocol ${JSON.stringify(protocol)}): ${err.message}`);
      throw err;
    }
    recent.push(describe(m));
    if (recent.length > 40) recent.shift();
    return m;
  }
};

// The library throws a message it cannot validate out of the socket's event
// handler; keep it so a step can name it instead of the run dying.
process.on('uncaughtException', err => {
  clientErrors.push(`uncaught: ${err && err.stack ? err.stack : err}`);
});

const settings = ServerConnection.makeSettings({
  baseUrl,
  wsUrl: baseUrl.replace(/^http/, 'ws'),
  token,
  appendToken: true,
  WebSocket: FRAMING === 'v1' ? RecordingWebSocket : LegacyWebSocket,
  serializer
});

function describe(m) {
  if (!m || !m.header) return JSON.stringify(m).slice(0, 200);
  let s = `${m.channel}/${m.header.msg_type}`;
  if (m.header.session) s += ` [session ${String(m.header.session).slice(0, 8)}]`;
  const c = m.content || {};
  if (c.execution_state) s += ` ${c.execution_state}`;
  if (c.status) s += ` status=${c.status}`;
  if (c.ename) s += ` ${c.ename}: ${c.evalue}`;
  if (m.parent_header && m.parent_header.msg_type) s += ` (re ${m.parent_header.msg_type})`;
  return s;
}

function stripANSI(s) {
  // eslint-disable-next-line no-control-regex
  return String(s).replace(/\x1b\[[0-9;]*[A-Za-z]/g, '');
}

function text(src) {
  return Array.isArray(src) ? src.join('') : src;
}

// Consecutive stream messages of one name are one output to a reader; a
// kernel may split them wherever it flushes.
function mergeStreams(msgs) {
  const out = [];
  for (const m of msgs) {
    const last = out[out.length - 1];
    if (
      m.header.msg_type === 'stream' &&
      last &&
      last.header.msg_type === 'stream' &&
      last.content.name === m.content.name
    ) {
      out[out.length - 1] = { ...last, content: { ...last.content, text: last.content.text + m.content.text } };
    } else {
      out.push(m);
    }
  }
  return out;
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    })
  ]).finally(() => clearTimeout(timer));
}

// execute runs code and returns the reply and the iopub messages that name
// the request as their parent, in arrival order.
async function execute(kernel, code, ms = STEP_TIMEOUT - 2000) {
  const iopub = [];
  const future = kernel.requestExecute({ code, stop_on_error: false });
  future.onIOPub = m => {
    iopub.push(m);
  };
  const reply = await withTimeout(future.done, ms, `execute_request ${JSON.stringify(code)}`);
  return { future, reply, iopub };
}

function notebook(cells) {
  return {
    nbformat: 4,
    nbformat_minor: 5,
    metadata: {
      kernelspec: { name: 'linger', display_name: 'Linger (Starlark)', language: 'starlark' },
      language_info: { name: 'starlark' }
    },
    cells
  };
}

const cellsV1 = [
  { id: 'setup', cell_type: 'code', source: 'x = 20\nprint("hi")\nx + 22', metadata: {}, outputs: [], execution_count: null },
  { id: 'notes', cell_type: 'markdown', source: '# Linger\nA *notebook* saved by @jupyterlab/services.', metadata: {} }
];

function assertSameCells(got, want) {
  assert.equal(got.length, want.length, `cell count: got ${got.length}, want ${want.length}`);
  want.forEach((w, i) => {
    const g = got[i];
    assert.equal(g.id, w.id, `cell ${i} id`);
    assert.equal(g.cell_type, w.cell_type, `cell ${i} cell_type`);
    assert.equal(text(g.source), w.source, `cell ${i} source`);
  });
}

test(`Jupyter client against linger serve (${FRAMING} websocket framing)`, { timeout: 10 * 60 * 1000 }, async t => {
  const passed = new Set();

  // step runs one protocol step as a subtest; needs names the steps it
  // depends on, which must have passed.
  async function step(name, needs, fn, timeout = STEP_TIMEOUT) {
    const missing = needs.filter(n => !passed.has(n));
    let ok = false;
    await t.test(name, { timeout }, async st => {
      if (missing.length > 0) {
        st.skip(`needs ${missing.map(n => JSON.stringify(n)).join(', ')}, which did not pass`);
        return;
      }
      const seen = recent.length;
      const errs = clientErrors.length;
      try {
        await fn(st);
      } catch (err) {
        const got = recent.slice(Math.max(0, seen - 5));
        if (err.response) {
          // A ServerConnection.ResponseError: name the request that failed.
          err.message += `\n  HTTP ${err.response.status} from ${err.response.url}`;
        }
        err.message +=
          `\n  websocket messages received around this step: ${got.length ? got.join(' | ') : '(none)'}` +
          (clientErrors.length > errs ? `\n  client errors: ${clientErrors.slice(errs).join(' | ')}` : '');
        throw err;
      }
      ok = true;
    });
    if (ok) passed.add(name);
  }

  const contents = new ContentsManager({ serverSettings: settings });
  const kernelManager = new KernelManager({ serverSettings: settings });
  const sessionManager = new SessionManager({ kernelManager, serverSettings: settings });
  let session;
  let kernel;
  let other;
  let executed;
  let kernelSession; // header.session of the kernel process before restart

  t.after(async () => {
    // Whatever failed, leave no kernel behind and let node exit.
    try {
      if (session && !session.isDisposed) await withTimeout(session.shutdown(), 5000, 'cleanup: session shutdown');
    } catch {
      // The shutdown step reports on this; cleanup only tries.
    }
    other?.dispose();
    session?.dispose();
    sessionManager.dispose();
    kernelManager.dispose();
    contents.dispose();
    for (const s of sockets) s.terminate();
  });

  await step('REST: GET /api and /api/kernelspecs (token accepted, linger kernelspec)', [], async () => {
    const resp = await ServerConnection.makeRequest(`${baseUrl}api`, {}, settings);
    assert.equal(resp.status, 200, `GET /api status ${resp.status}`);
    const body = await resp.json();
    assert.equal(typeof body.version, 'string', `GET /api body ${JSON.stringify(body)} has no version`);
    const specs = await KernelSpecAPI.getSpecs(settings);
    assert.ok(specs.kernelspecs.linger, `kernelspecs ${Object.keys(specs.kernelspecs)} lack "linger"`);
    assert.equal(specs.kernelspecs.linger.name, 'linger');
  });

  if (process.env.LINGER_CUDA_FAKE) {
    // The server found a (fake) linger-cuda whose probe answered: a second
    // kernelspec, valid for the client, whose kernel starts and runs a cell.
    await step('kernelspecs: linger-cuda ("Linger (CUDA)") listed with its GPU; a session on it runs a cell', [], async () => {
      const specs = await KernelSpecAPI.getSpecs(settings);
      assert.equal(specs.default, 'linger', 'default kernelspec');
      const cuda = specs.kernelspecs['linger-cuda'];
      assert.ok(cuda, `kernelspecs ${Object.keys(specs.kernelspecs)} lack "linger-cuda"`);
      assert.equal(cuda.display_name, 'Linger (CUDA)');
      assert.equal(cuda.language, 'starlark');
      assert.equal(cuda.metadata?.linger?.gpu, 'NVIDIA H200', `metadata ${JSON.stringify(cuda.metadata)}`);
      const gpu = await sessionManager.startNew(
        { path: 'gpu.ipynb', type: 'notebook', name: 'gpu.ipynb', kernel: { name: 'linger-cuda' } }, {});
      try {
        assert.equal(gpu.kernel?.name, 'linger-cuda');
        const { reply, iopub } = await execute(gpu.kernel, '6 * 7');
        assert.equal(reply.content.status, 'ok', `reply ${JSON.stringify(reply.content)}`);
        const result = iopub.find(m => m.header.msg_type === 'execute_result');
        assert.equal(result?.content.data['text/plain'], '42');
      } finally {
        await gpu.shutdown();
        gpu.dispose();
      }
    });
  }

  await step('contents: PUT save a new notebook (ContentsManager.save)', [], async () => {
    const model = await contents.save(NB_PATH, { type: 'notebook', format: 'json', content: notebook(cellsV1) });
    assert.equal(model.path, NB_PATH);
    assert.equal(model.name, NB_PATH);
    assert.equal(model.type, 'notebook');
  });

  await step('contents: GET re-read the notebook with the same cells', ['contents: PUT save a new notebook (ContentsManager.save)'], async () => {
    const model = await contents.get(NB_PATH, { content: true });
    assert.equal(model.type, 'notebook');
    assert.equal(model.format, 'json');
    const nb = model.content;
    assert.equal(nb.nbformat, 4);
    assert.ok(nb.nbformat_minor >= 5, `nbformat_minor ${nb.nbformat_minor}: cell ids need 4.5`);
    assert.equal(nb.metadata?.kernelspec?.name, 'linger', 'metadata.kernelspec.name');
    assertSameCells(nb.cells, cellsV1);
  });

  await step('checkpoints: create, list, restore, delete', ['contents: PUT save a new notebook (ContentsManager.save)'], async () => {
    const cp = await contents.createCheckpoint(NB_PATH);
    assert.equal(typeof cp.id, 'string', `checkpoint ${JSON.stringify(cp)} has no id`);
    assert.ok(cp.last_modified, `checkpoint ${JSON.stringify(cp)} has no last_modified`);
    const list = await contents.listCheckpoints(NB_PATH);
    assert.ok(list.some(c => c.id === cp.id), `listCheckpoints ${JSON.stringify(list)} lacks ${cp.id}`);

    const changed = [{ id: 'changed', cell_type: 'code', source: 'y = 1', metadata: {}, outputs: [], execution_count: null }];
    await contents.save(NB_PATH, { type: 'notebook', format: 'json', content: notebook(changed) });
    assertSameCells((await contents.get(NB_PATH)).content.cells, changed);
    await contents.restoreCheckpoint(NB_PATH, cp.id);
    assertSameCells((await contents.get(NB_PATH)).content.cells, cellsV1);

    await contents.deleteCheckpoint(NB_PATH, cp.id);
    const after = await contents.listCheckpoints(NB_PATH);
    assert.ok(!after.some(c => c.id === cp.id), `checkpoint ${cp.id} still listed after delete: ${JSON.stringify(after)}`);
  });

  await step('sessions: POST start a session with a linger kernel (SessionManager.startNew)', [], async () => {
    session = await sessionManager.startNew(
      { path: NB_PATH, type: 'notebook', name: NB_PATH, kernel: { name: 'linger' } },
      {}
    );
    assert.ok(session.id, 'session has no id');
    assert.equal(session.path, NB_PATH);
    kernel = session.kernel;
    assert.ok(kernel, 'session has no kernel');
    assert.equal(kernel.name, 'linger');
    assert.match(kernel.id, UUID_RE, 'kernel id is a UUID');
    const listed = await SessionAPI.listRunning(settings);
    assert.ok(listed.some(s => s.id === session.id), `GET /api/sessions ${JSON.stringify(listed)} lacks ${session.id}`);
  });

  const started = 'sessions: POST start a session with a linger kernel (SessionManager.startNew)';

  await step('websocket: kernel_info_reply (kernel.info: protocol_version, language_info)', [started], async () => {
    const info = await withTimeout(kernel.info, STEP_TIMEOUT - 2000, 'kernel_info_request');
    assert.match(String(info.protocol_version), /^5\.\d+/, `protocol_version ${info.protocol_version}`);
    assert.equal(info.implementation, 'linger', 'implementation');
    const li = info.language_info;
    assert.ok(li, 'kernel_info_reply has no language_info');
    assert.equal(typeof li.name, 'string', 'language_info.name');
    assert.ok(li.name.length > 0, 'language_info.name is empty');
    assert.equal(typeof li.file_extension, 'string', 'language_info.file_extension');
    assert.equal(typeof li.mimetype, 'string', 'language_info.mimetype');
    assert.equal(kernel.connectionStatus, 'connected');
  });

  await step(`websocket: negotiated ${FRAMING === 'v1' ? `subprotocol ${V1} (binary frames)` : 'legacy JSON framing (no subprotocol, text frames)'}`, [started], async () => {
    const ws = sockets.filter(s => s.readyState === WebSocket.OPEN);
    assert.ok(ws.length > 0, 'no open kernel websocket');
    const s = ws[ws.length - 1];
    if (FRAMING === 'v1') {
      assert.deepEqual(s.offered, [V1], 'the client offered the v1 subprotocol');
      assert.equal(s.protocol, V1, `server selected subprotocol ${JSON.stringify(s.protocol)}`);
      assert.ok(s.frames.binary > 0, 'no binary frame received');
      assert.equal(s.frames.text, 0, `${s.frames.text} text frames received on a v1 socket`);
    } else {
      assert.deepEqual(s.offered, [], 'the legacy client offered no subprotocol');
      assert.equal(s.protocol, '', `server selected subprotocol ${JSON.stringify(s.protocol)} that was not offered`);
      assert.ok(s.frames.text > 0, 'no text frame received');
    }
  });

  const info = 'websocket: kernel_info_reply (kernel.info: protocol_version, language_info)';

  await step('execute: busy → execute_input → stream "hi\\n" → execute_result 42 → idle, execute_reply ok', [info], async st => {
    const code = 'x = 20\nprint("hi")\nx + 22';
    const t0 = performance.now();
    const { future, reply, iopub } = await execute(kernel, code);
    st.diagnostic(`execute round trip (request to idle): ${(performance.now() - t0).toFixed(1)} ms`);
    executed = { reply, iopub };
    const msgs = mergeStreams(iopub);
    const types = msgs.map(m => m.header.msg_type + (m.header.msg_type === 'status' ? `:${m.content.execution_state}` : ''));
    assert.deepEqual(types, ['status:busy', 'execute_input', 'stream', 'execute_result', 'status:idle'], `iopub sequence ${JSON.stringify(types)}`);
    for (const m of iopub) {
      assert.equal(m.channel, 'iopub');
      assert.equal(m.parent_header.msg_id, future.msg.header.msg_id, 'iopub parent_header.msg_id');
    }
    // @jupyterlab/services drops a message whose header.session differs
    // from the last one it saw ("old message"), so one kernel process must
    // keep one session.
    const sessionsSeen = new Set([...iopub, reply].map(m => m.header.session));
    assert.equal(sessionsSeen.size, 1, `header.session differs within one request: ${[...sessionsSeen].join(', ')}`);
    assert.equal(msgs[1].content.code, code, 'execute_input.code');
    assert.equal(msgs[2].content.name, 'stdout', 'stream name');
    assert.equal(msgs[2].content.text, 'hi\n', 'stream text');
    assert.equal(msgs[3].content.data['text/plain'], '42', 'execute_result text/plain');
    assert.equal(reply.channel, 'shell');
    assert.equal(reply.header.msg_type, 'execute_reply');
    assert.equal(reply.parent_header.msg_id, future.msg.header.msg_id, 'execute_reply parent_header.msg_id');
    assert.equal(reply.content.status, 'ok', `execute_reply ${JSON.stringify(reply.content)}`);
    assert.ok(Number.isInteger(reply.content.execution_count) && reply.content.execution_count > 0, 'execution_count');
    assert.equal(msgs[3].content.execution_count, reply.content.execution_count, 'execute_result execution_count');
    assert.equal(msgs[1].content.execution_count, reply.content.execution_count, 'execute_input execution_count');
  });

  const exec = 'execute: busy → execute_input → stream "hi\\n" → execute_result 42 → idle, execute_reply ok';

  await step('messaging: kernel messages carry the kernel\'s own session id, not the client\'s', [exec], async () => {
    // Messaging spec 5.x, "the session id": a kernel session id, in headers
    // from a kernel, identifies the kernel process and is regenerated on
    // restart; the client's id belongs in parent_header. @jupyterlab/services
    // keys its "old message" filter on it.
    const { reply, iopub } = executed;
    kernelSession = reply.header.session;
    assert.ok(kernelSession, 'execute_reply header.session is empty');
    assert.equal(reply.parent_header.session, kernel.clientId, 'parent_header.session is the client session');
    assert.notEqual(kernelSession, kernel.clientId, 'execute_reply header.session is the client\'s session id, not the kernel\'s');
    for (const m of iopub) {
      assert.equal(m.header.session, kernelSession, `iopub ${m.header.msg_type} header.session`);
    }
  });

  await step('execute: error cell → error output, execute_reply status error, traceback names the line', [info], async () => {
    const code = 'a = 1\nb = 2\nfail("boom")\nc = 3';
    const { reply, iopub } = await execute(kernel, code);
    const errs = iopub.filter(m => m.header.msg_type === 'error');
    assert.equal(errs.length, 1, `error outputs: ${iopub.map(m => m.header.msg_type).join(', ')}`);
    assert.equal(reply.content.status, 'error', `execute_reply ${JSON.stringify(reply.content)}`);
    for (const c of [errs[0].content, reply.content]) {
      assert.equal(typeof c.ename, 'string');
      assert.ok(c.ename.length > 0, 'ename is empty');
      assert.match(stripANSI(c.evalue), /boom/, 'evalue');
      assert.ok(Array.isArray(c.traceback), 'traceback is a list of strings');
    }
    const tb = stripANSI(errs[0].content.traceback.join('\n'));
    assert.match(tb, /line 3\b|:3(:|\b)/, `traceback does not name line 3 of the cell:\n${tb}`);
    const last = iopub[iopub.length - 1];
    assert.equal(last.header.msg_type, 'status');
    assert.equal(last.content.execution_state, 'idle');
  });

  await step('shell: complete, inspect, is_complete, history, comm_info each get a reply', [info], async () => {
    const ms = 5000;
    const complete = await withTimeout(kernel.requestComplete({ code: 'pri', cursor_pos: 3 }), ms, 'complete_request');
    assert.equal(complete.content.status, 'ok', `complete_reply ${JSON.stringify(complete.content)}`);
    assert.ok(complete.content.matches.includes('print'), `complete "pri": ${JSON.stringify(complete.content.matches)}`);
    const inspect = await withTimeout(kernel.requestInspect({ code: 'len', cursor_pos: 3, detail_level: 0 }), ms, 'inspect_request');
    assert.ok(['ok', 'error'].includes(inspect.content.status), `inspect_reply ${JSON.stringify(inspect.content)}`);
    const done = await withTimeout(kernel.requestIsComplete({ code: 'y = 1' }), ms, 'is_complete_request');
    assert.equal(done.content.status, 'complete', `is_complete "y = 1": ${JSON.stringify(done.content)}`);
    const open = await withTimeout(kernel.requestIsComplete({ code: 'def f():' }), ms, 'is_complete_request');
    assert.equal(open.content.status, 'incomplete', `is_complete "def f():": ${JSON.stringify(open.content)}`);
    const hist = await withTimeout(kernel.requestHistory({ output: false, raw: true, hist_access_type: 'tail', n: 10 }), ms, 'history_request');
    assert.equal(hist.content.status, 'ok', `history_reply ${JSON.stringify(hist.content)}`);
    const comm = await withTimeout(kernel.requestCommInfo({}), ms, 'comm_info_request');
    assert.equal(comm.content.status, 'ok', `comm_info_reply ${JSON.stringify(comm.content)}`);
  });

  await step('websocket: a second client on the same kernel receives iopub', [info], async () => {
    other = kernelManager.connectTo({ model: { id: kernel.id, name: kernel.name } });
    assert.notEqual(other.clientId, kernel.clientId);
    await withTimeout(other.info, 10000, 'second client kernel_info_request');
    const seen = [];
    other.iopubMessage.connect((_, m) => seen.push(m));
    const code = 'print("to everyone")';
    const { future } = await execute(kernel, code);
    const id = future.msg.header.msg_id;
    // The second connection handles its copy of the iopub stream on its
    // own; give it until it sees the request's idle.
    const deadline = Date.now() + 5000;
    while (
      !seen.some(m => m.parent_header.msg_id === id && m.header.msg_type === 'status' && m.content.execution_state === 'idle') &&
      Date.now() < deadline
    ) {
      await new Promise(r => setTimeout(r, 20));
    }
    const mine = seen.filter(m => m.parent_header.msg_id === id);
    const types = mine.map(m => m.header.msg_type);
    assert.ok(types.includes('execute_input'), `second client saw ${JSON.stringify(types)}`);
    assert.ok(
      mine.some(m => m.header.msg_type === 'stream' && m.content.text.includes('to everyone')),
      `second client saw no stream: ${JSON.stringify(types)}`
    );
    other.dispose();
    other = undefined;
  });

  await step('contents: save the executed notebook with its outputs and re-read it', [exec, 'contents: PUT save a new notebook (ContentsManager.save)'], async () => {
    const outputs = mergeStreams(executed.iopub)
      .filter(m => ['stream', 'execute_result'].includes(m.header.msg_type))
      .map(m =>
        m.header.msg_type === 'stream'
          ? { output_type: 'stream', name: m.content.name, text: m.content.text }
          : { output_type: 'execute_result', execution_count: m.content.execution_count, data: m.content.data, metadata: m.content.metadata ?? {} }
      );
    const cells = [{ ...cellsV1[0], outputs, execution_count: executed.reply.content.execution_count }, cellsV1[1]];
    await contents.save(NB_PATH, { type: 'notebook', format: 'json', content: notebook(cells) });
    const nb = (await contents.get(NB_PATH)).content;
    assertSameCells(nb.cells, cells);
    const got = nb.cells[0];
    assert.equal(got.execution_count, executed.reply.content.execution_count, 'execution_count kept');
    assert.equal(got.outputs.length, 2, `outputs ${JSON.stringify(got.outputs)}`);
    assert.equal(got.outputs[0].output_type, 'stream');
    assert.equal(text(got.outputs[0].text), 'hi\n');
    assert.equal(got.outputs[1].output_type, 'execute_result');
    assert.equal(text(got.outputs[1].data['text/plain']), '42');
  });

  await step('interrupt: POST /api/kernels/{id}/interrupt stops `while True: pass`, reply error KeyboardInterrupt within 2 s', [info], async st => {
    const iopub = [];
    const future = kernel.requestExecute({ code: 'n = 0\nwhile True:\n    n += 1\n' });
    future.onIOPub = m => iopub.push(m);
    // Interrupt only once the cell is running, as a person would.
    const deadline = Date.now() + 5000;
    while (!iopub.some(m => m.header.msg_type === 'execute_input') && Date.now() < deadline) {
      await new Promise(r => setTimeout(r, 20));
    }
    assert.ok(iopub.some(m => m.header.msg_type === 'execute_input'), 'the long cell never started (no execute_input)');
    await new Promise(r => setTimeout(r, 200));
    const t0 = Date.now();
    await kernel.interrupt();
    const reply = await withTimeout(future.done, 5000, 'execute_reply after interrupt');
    const elapsed = Date.now() - t0;
    st.diagnostic(`interrupt (REST) to execute_reply and idle: ${elapsed} ms`);
    assert.equal(reply.content.status, 'error', `execute_reply ${JSON.stringify(reply.content)}`);
    assert.equal(reply.content.ename, 'KeyboardInterrupt', 'ename');
    assert.ok(elapsed < 2000, `interrupt took ${elapsed} ms to the reply and idle`);
    const last = iopub[iopub.length - 1];
    assert.equal(last.content.execution_state, 'idle', 'the kernel went idle after the interrupt');
    // The kernel is usable afterwards and kept its globals.
    const { reply: after, iopub: out } = await execute(kernel, 'x');
    assert.equal(after.content.status, 'ok', `after interrupt: ${JSON.stringify(after.content)}`);
    const res = out.find(m => m.header.msg_type === 'execute_result');
    assert.equal(res?.content.data['text/plain'], '20', 'x survives an interrupt');
  });

  await step('interrupt: interrupt_request on the control channel stops a long cell', [info], async st => {
    const iopub = [];
    const future = kernel.requestExecute({ code: 'while True:\n    pass\n' });
    future.onIOPub = m => iopub.push(m);
    const deadline = Date.now() + 5000;
    while (!iopub.some(m => m.header.msg_type === 'execute_input') && Date.now() < deadline) {
      await new Promise(r => setTimeout(r, 20));
    }
    await new Promise(r => setTimeout(r, 200));
    const t0 = Date.now();
    const req = KernelMessage.createMessage({
      msgType: 'interrupt_request',
      channel: 'control',
      session: kernel.clientId,
      content: {}
    });
    const ctl = kernel.sendControlMessage(req, true);
    const ctlIOPub = [];
    ctl.onIOPub = m => ctlIOPub.push(m);
    const ctlReply = await withTimeout(
      new Promise(resolve => {
        ctl.onReply = resolve;
      }),
      5000,
      'interrupt_reply on control'
    );
    assert.equal(ctlReply.header.msg_type, 'interrupt_reply');
    assert.equal(ctlReply.channel, 'control');
    const reply = await withTimeout(future.done, 5000, 'execute_reply after interrupt_request');
    const elapsed = Date.now() - t0;
    st.diagnostic(`interrupt_request (control) to execute_reply: ${elapsed} ms`);
    assert.equal(reply.content.ename, 'KeyboardInterrupt', `execute_reply ${JSON.stringify(reply.content)}`);
    assert.ok(elapsed < 2000, `interrupt_request took ${elapsed} ms`);
    // A kernel brackets every request, control ones too, with status busy
    // and idle whose parent is the request; @jupyterlab/services resolves a
    // control future (debug requests, for one) only on that idle.
    await withTimeout(ctl.done, 1000, 'status idle with the interrupt_request as parent (the control future never resolves)').catch(err => {
      throw new Error(`${err.message}; iopub for it: ${JSON.stringify(ctlIOPub.map(m => m.header.msg_type + ':' + (m.content.execution_state ?? '')))}`);
    });
  });

  await step('restart: POST /api/kernels/{id}/restart gives a fresh kernel (global x gone), same id', [info], async st => {
    const before = await execute(kernel, 'x');
    assert.equal(before.reply.content.status, 'ok', `x before restart: ${JSON.stringify(before.reply.content)}`);
    const id = kernel.id;
    const t0 = performance.now();
    await withTimeout(kernel.restart(), STEP_TIMEOUT - 5000, 'restart');
    st.diagnostic(`restart (REST restart and reconnect): ${(performance.now() - t0).toFixed(1)} ms`);
    assert.equal(kernel.id, id, 'kernel id changed across a restart');
    const info2 = await withTimeout(kernel.info, 5000, 'kernel_info after restart');
    assert.match(String(info2.protocol_version), /^5\./);
    const after = await execute(kernel, 'x');
    assert.equal(after.reply.content.status, 'error', `x after restart: ${JSON.stringify(after.reply.content)}`);
    assert.match(stripANSI(`${after.reply.content.ename} ${after.reply.content.evalue}`), /\bx\b/, 'the error names x');
    const fresh = await execute(kernel, '1 + 1');
    assert.equal(fresh.reply.content.status, 'ok', 'the restarted kernel executes');
  });

  await step('messaging: a restarted kernel has a new kernel session id', ['restart: POST /api/kernels/{id}/restart gives a fresh kernel (global x gone), same id', 'messaging: kernel messages carry the kernel\'s own session id, not the client\'s'], async () => {
    const { reply } = await execute(kernel, '2 + 2');
    assert.notEqual(reply.header.session, kernelSession, 'header.session unchanged across a restart');
    assert.notEqual(reply.header.session, kernel.clientId, 'header.session is the client\'s');
  });

  await step('shutdown: DELETE /api/sessions/{id} ends the session and its kernel', [started], async () => {
    const sid = session.id;
    const kid = kernel.id;
    await session.shutdown();
    const sessions = await SessionAPI.listRunning(settings);
    assert.ok(!sessions.some(s => s.id === sid), `session ${sid} still listed: ${JSON.stringify(sessions)}`);
    const kernels = await KernelAPI.listRunning(settings);
    assert.ok(!kernels.some(k => k.id === kid), `kernel ${kid} still listed: ${JSON.stringify(kernels)}`);
    session = undefined;
  });

  await step('client: no undecodable or invalid kernel message during the run', [], async () => {
    assert.deepEqual(clientErrors, [], `errors raised inside @jupyterlab/services: ${clientErrors.join(' | ')}`);
  });
});
