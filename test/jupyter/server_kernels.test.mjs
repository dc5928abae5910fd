// Drives Debian's Jupyter Server, with its own kernel manager (not as a
// gateway to Linger), through @jupyterlab/services, as JupyterLab does:
// the server finds the kernelspec `linger kernelspec install` wrote,
// starts `linger kernel --connection-file` for a notebook's session and
// relays the ZeroMQ sockets over its kernel websocket.
//
// Started by TestJupyterServerKernels (server_kernels_test.go), which
// passes JS_URL (http://127.0.0.1:PORT/) and JS_TOKEN.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { KernelSpecAPI, KernelManager, ServerConnection, SessionManager } from '@jupyterlab/services';

console.debug = () => {};
const STEP = 60000;

const settings = ServerConnection.makeSettings({
  baseUrl: process.env.JS_URL,
  wsUrl: process.env.JS_URL.replace(/^http/, 'ws'),
  token: process.env.JS_TOKEN,
  appendToken: true,
  WebSocket
});

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    })
  ]).finally(() => clearTimeout(timer));
}

// execute runs code and returns the reply's content and what the cell
// printed on stdout.
async function execute(kernel, code, onInput) {
  let stdout = '';
  const future = kernel.requestExecute({ code, stop_on_error: false });
  future.onIOPub = m => {
    if (m.header.msg_type === 'stream' && m.content.name === 'stdout') stdout += m.content.text;
    if (m.header.msg_type === 'execute_input' && onInput) onInput();
  };
  const reply = await withTimeout(future.done, STEP, `execute ${JSON.stringify(code)}`);
  return { content: reply.content, stdout };
}

const kernels = new KernelManager({ serverSettings: settings });
const sessions = new SessionManager({ serverSettings: settings, kernelManager: kernels });
let session;

test('the kernelspec is listed', { timeout: STEP }, async () => {
  const specs = await KernelSpecAPI.getSpecs(settings);
  const spec = specs.kernelspecs.linger;
  assert.ok(spec, `kernelspecs: ${Object.keys(specs.kernelspecs)}`);
  assert.equal(spec.display_name, 'Linger (Starlark)');
  assert.equal(spec.language, 'starlark');
  assert.match(spec.resources['logo-svg'] || '', /logo-svg\.svg$/);
});

test('a session starts the kernel', { timeout: STEP }, async () => {
  session = await sessions.startNew({ path: 'js.ipynb', type: 'notebook', name: 'js.ipynb', kernel: { name: 'linger' } });
  const info = await withTimeout(session.kernel.info, STEP, 'kernel_info');
  assert.equal(info.implementation, 'linger');
  assert.equal(info.protocol_version, '5.3');
  assert.equal(info.language_info.pygments_lexer, 'python');
});

test('execute, complete and inspect', { timeout: STEP }, async () => {
  const k = session.kernel;
  const r = await execute(k, 'x = 6\nprint(x * 7)');
  assert.equal(r.content.status, 'ok');
  assert.equal(r.stdout, '42\n');
  const c = await withTimeout(k.requestComplete({ code: 'pri', cursor_pos: 3 }), STEP, 'complete');
  assert.ok(c.content.matches.includes('print'), `matches ${c.content.matches}`);
  const i = await withTimeout(k.requestInspect({ code: 'print', cursor_pos: 5, detail_level: 0 }), STEP, 'inspect');
  assert.equal(i.content.found, true);
  const err = await execute(k, '1 // 0');
  assert.equal(err.content.status, 'error');
});

test('interrupt stops an endless cell; the kernel goes on', { timeout: STEP }, async () => {
  const k = session.kernel;
  // Interrupted a second after the kernel said it began the cell.
  let interrupting;
  const began = new Promise(ok => (interrupting = ok));
  const running = execute(k, 'n = 0\nwhile True:\n    n += 1\n', () => interrupting());
  await began;
  await new Promise(ok => setTimeout(ok, 1000));
  await withTimeout(k.interrupt(), STEP, 'interrupt');
  const r = await running;
  assert.equal(r.content.status, 'error');
  assert.equal(r.content.ename, 'KeyboardInterrupt');
  const after = await execute(k, 'print(n > 0, x)');
  assert.equal(after.stdout, 'True 6\n');
});

test('restart gives a fresh kernel', { timeout: STEP }, async () => {
  const k = session.kernel;
  await withTimeout(k.restart(), STEP, 'restart');
  await withTimeout(k.info, STEP, 'kernel_info after restart');
  const r = await execute(k, 'print(x)');
  assert.equal(r.content.status, 'error', 'x survived the restart');
  const ok = await execute(k, 'print("fresh")');
  assert.equal(ok.stdout, 'fresh\n');
});

test('shutdown', { timeout: STEP }, async () => {
  await withTimeout(session.shutdown(), STEP, 'shutdown');
  const running = await (await ServerConnection.makeRequest(`${settings.baseUrl}api/kernels`, {}, settings)).json();
  assert.deepEqual(running, []);
  sessions.dispose();
  kernels.dispose();
});
