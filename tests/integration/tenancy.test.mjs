// One client cannot see, steer or spend another's: keys with roles and tenants, what a browser
// can make warmslot do (Content-Type, CORS, Host), the supervised llama-server's own key, and
// client text that never reaches a terminal raw. Real llama-server processes on tiny models.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { getJson, llamaServerBin, modelPath, postJson, startLlama } from './lib/llama.mjs';
import { repoRoot, startProcess, tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot, warmslotBin } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const keys = {
  admin: 'tenancy-admin-key-0001',
  a: 'tenancy-client-a-0001',
  b: 'tenancy-client-b-0001',
  observer: 'tenancy-observer-0001',
};
const bearer = (k) => ({ authorization: `Bearer ${k}` });
const keyLines = `api_keys:
  - ${keys.admin}
  - {key: ${keys.a}, role: client, tenant: a}
  - {key: ${keys.b}, role: client, tenant: b}
  - {key: ${keys.observer}, role: observer, tenant: a}
`;
const routingFast = 'routing:\n  reconcile_interval: 100ms\n';

// `disk`: warmslot gets the slot directory (the disk tier on).
async function setup(extra = '', apiKeys, { disk = false } = {}) {
  const llama = await startLlama({ slots: 3, ctx: 8192 });
  let ws;
  try {
    const backend = { name: 'b', url: llama.url, slotSaveDir: disk ? llama.saveDir : undefined };
    ws = await startWarmslot({ backends: [backend], extra: routingFast + extra, apiKeys });
  } catch (e) {
    await llama.stop();
    throw e;
  }
  return { llama, ws, stop: async () => { await ws.stop(); await llama.stop(); } };
}

// One request on a fresh connection, written as given; the whole answer as text (the
// connection closes after it).
function raw(port, text, timeoutMs = 10000) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    const chunks = [];
    const timer = setTimeout(() => { s.destroy(); reject(new Error(`no answer within ${timeoutMs} ms`)); }, timeoutMs);
    s.on('data', (d) => {
      chunks.push(d);
      const got = Buffer.concat(chunks).toString('latin1');
      const head = got.indexOf('\r\n\r\n');
      const len = got.match(/\r\ncontent-length: (\d+)/i);
      if (head >= 0 && len && got.length >= head + 4 + Number(len[1])) { clearTimeout(timer); s.destroy(); resolve(got); }
    });
    s.on('end', () => { clearTimeout(timer); resolve(Buffer.concat(chunks).toString('latin1')); });
    s.on('error', (e) => { clearTimeout(timer); reject(e); });
    s.write(Buffer.from(text, 'latin1'));
  });
}
const statusOf = (answer) => Number(answer.match(/^HTTP\/1\.1 (\d+)/)?.[1]);

// A request with a Host header of our choosing (fetch would send the URL's).
function withHost(url, target, host, headers = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = http.request({ host: '127.0.0.1', port: u.port, path: target, headers: { host, ...headers } }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('documents: one tenant\'s remembered original never reaches another tenant\'s request', { timeout: 300000 }, async () => {
  const s = await setup(`${keyLines}rewrite:\n  default:\n    documents:\n      min_bytes: 2KiB\n      edits: append\n`);
  try {
    const doc = makeDocument(2601, 4000);
    const first = await postJson(`${s.ws.url}/v1/chat/completions`, chat(doc, 'Summarise.'), bearer(keys.a));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    // B sends a revision of A's document (one line changed): B's own text goes out.
    const lines = doc.split('\n');
    lines[Math.floor(lines.length / 2)] = '2601.999 tenant b wrote this line.';
    const revised = lines.join('\n');
    const explained = await postJson(`${s.ws.url}/warmslot/explain`, chat(revised, 'What changed?'), bearer(keys.b));
    assert.equal(explained.status, 200, JSON.stringify(explained.body));
    assert.equal(explained.body.x_warmslot_rewrites, 'none');
    assert.equal(explained.body.request.messages[0].content, revised);
    const sentByB = await postJson(`${s.ws.url}/v1/chat/completions`, chat(revised, 'What changed?'), bearer(keys.b));
    assert.equal(sentByB.status, 200);
    assert.equal(sentByB.headers.get('x-warmslot-rewrites'), 'none');
    // The same revision from A itself is recognised (the rule is on, and works per tenant).
    const own = await postJson(`${s.ws.url}/warmslot/explain`, chat(revised, 'What changed?'), bearer(keys.a));
    assert.equal(own.body.x_warmslot_rewrites, 'edits_append=1');
    assert.equal(own.body.request.messages[0].content, doc);
  } finally {
    await s.stop();
  }
});

test('roles: clients use the API, observers read, only admins administer; status shows the caller\'s tenant', { timeout: 300000 }, async () => {
  const s = await setup(keyLines);
  try {
    const url = s.ws.url;
    const ask = async (key, label, system) => {
      const r = await postJson(`${url}/v1/chat/completions`, chat(system, 'Hi'), { ...bearer(key), 'x-warmslot-label': label });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r;
    };
    await waitFor('routing', async () => (await getJson(`${url}/health`, { headers: bearer(keys.admin) })).body.backends?.[0]?.routing, 30000);
    // Long enough to be worth a slot each (valuable requests are pinned and get a preview).
    const docA = makeDocument(2701, 6000);
    await ask(keys.a, 'label of tenant a', docA);
    await ask(keys.b, 'label of tenant b', makeDocument(2702, 6000));

    // Explain is no oracle: b sending a's exact request learns nothing of a's slot.
    const explain = async (key) => {
      const r = await postJson(`${url}/warmslot/explain`, chat(docA, 'Hi'), bearer(key));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.body.plan;
    };
    const planOfA = await explain(keys.a);
    assert.equal(planOfA.route, 'hit', JSON.stringify(planOfA));
    assert.ok(planOfA.expected_cached_tokens > 1000, JSON.stringify(planOfA));
    const planOfB = await explain(keys.b);
    assert.notEqual(planOfB.route, 'hit', JSON.stringify(planOfB));
    assert.equal(planOfB.expected_cached_tokens, 0, JSON.stringify(planOfB));
    assert.equal(planOfB.matched_levels, 0);
    assert.equal((await explain(keys.admin)).route, 'hit', 'an admin sees what a request would get');

    const status = async (key) => {
      const r = await getJson(`${url}/warmslot/status`, { headers: bearer(key) });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return { requests: r.body.requests, previews: r.body.backends.flatMap((b) => b.slots).map((sl) => sl.preview).filter(Boolean) };
    };
    const seenByA = await status(keys.a);
    assert.deepEqual(seenByA.previews, ['label of tenant a']);
    // The size of what another tenant's request left in a slot is not shown either.
    const slotsSeen = async (key) => (await getJson(`${url}/warmslot/status`, { headers: bearer(key) })).body.backends[0].slots;
    const sized = (slots) => slots.filter((sl) => sl.tokens > 1000).length;
    assert.equal(sized(await slotsSeen(keys.admin)), 2);
    assert.equal(sized(await slotsSeen(keys.a)), 1);
    assert.equal(sized(await slotsSeen(keys.b)), 1);
    assert.equal(seenByA.requests.filter((r) => r.path === '/v1/chat/completions').length, 1);
    const seenByB = await status(keys.b);
    assert.deepEqual(seenByB.previews, ['label of tenant b']);
    const seenByObserver = await status(keys.observer);  // an observer of tenant a
    assert.deepEqual(seenByObserver.previews, ['label of tenant a']);
    const seenByAdmin = await status(keys.admin);
    assert.deepEqual(seenByAdmin.previews.sort(), ['label of tenant a', 'label of tenant b']);
    assert.ok(seenByAdmin.requests.filter((r) => r.path === '/v1/chat/completions').length >= 2);

    // What each role may call: 403 in the API's own error shape, before the body is read.
    const warm = { model: 'm', system: 'x', documents: [] };
    const forbidden = await postJson(`${url}/admin/warm`, warm, bearer(keys.a));
    assert.equal(forbidden.status, 403);
    assert.equal(forbidden.body.error.type, 'permission_error');
    assert.equal((await postJson(`${url}/admin/snapshot`, {}, bearer(keys.observer))).status, 403);
    assert.equal((await getJson(`${url}/slots`, { headers: bearer(keys.a) })).status, 403);
    assert.equal((await getJson(`${url}/slots`, { headers: bearer(keys.admin) })).status, 200);
    assert.equal((await getJson(`${url}/metrics`, { headers: bearer(keys.a) })).status, 403);
    assert.equal((await getJson(`${url}/metrics`, { headers: bearer(keys.observer) })).status, 200);
    const observerAsks = await postJson(`${url}/v1/chat/completions`, chat('x', 'y'), bearer(keys.observer));
    assert.equal(observerAsks.status, 403);
    const messages = await postJson(`${url}/v1/messages`, { max_tokens: 1, messages: [{ role: 'user', content: 'x' }] }, bearer(keys.observer));
    assert.equal(messages.status, 403);
    assert.equal(messages.body.type, 'error', 'the Anthropic shape on /v1/messages');
    assert.equal((await postJson(`${url}/v1/chat/completions`, chat('x', 'y'), bearer('not-a-key-at-all'))).status, 401);
  } finally {
    await s.stop();
  }
});

test('browsers: only JSON bodies, warmslot\'s own CORS, the Host allow-list, no-store and nosniff', { timeout: 300000 }, async () => {
  const s = await setup('http:\n  cors_origins: ["https://app.example"]\n');
  try {
    const url = s.ws.url;
    const body = JSON.stringify(chat('You are terse.', 'Hi'));
    // A cross-site form or a fetch without preflight sends text/plain: refused, never run.
    const plain = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body });
    assert.equal(plain.status, 415);
    assert.equal((await plain.json()).error.code, 415);
    const form = await fetch(`${url}/admin/warm`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: '{"model":"m","system":"x"}' });
    assert.equal(form.status, 415);
    const json = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json; charset=utf-8' }, body });
    assert.equal(json.status, 200);
    await json.arrayBuffer();

    // llama-server reflects any Origin; warmslot answers only the configured ones (another
    // origin is refused outright: cross-site.test.mjs).
    const evil = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', origin: 'https://evil.example' }, body });
    assert.equal(evil.status, 403);
    assert.equal(evil.headers.get('access-control-allow-origin'), null);
    await evil.arrayBuffer();
    const models = await fetch(`${url}/v1/models`);
    assert.equal(models.status, 200);
    assert.equal(models.headers.get('access-control-allow-origin'), null);
    await models.arrayBuffer();
    const app = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', origin: 'https://app.example' }, body });
    assert.equal(app.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(app.headers.get('vary') ?? '', /Origin/);
    await app.arrayBuffer();
    const preflight = await fetch(`${url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, authorization' } });
    assert.equal(preflight.status, 204);
    assert.equal(preflight.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.match(preflight.headers.get('access-control-allow-headers'), /Authorization/);
    const refusedPreflight = await fetch(`${url}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } });
    assert.equal(refusedPreflight.headers.get('access-control-allow-origin'), null);
    assert.equal(refusedPreflight.headers.get('access-control-allow-methods'), null);

    // DNS rebinding: a page of evil.example whose name now points at 127.0.0.1.
    const rebound = await withHost(url, '/warmslot/status', 'evil.example:8080');
    assert.equal(rebound.status, 421);
    assert.equal((await withHost(url, '/health', 'evil.example')).status, 421);
    assert.equal((await withHost(url, '/warmslot/status', `localhost:${s.ws.port}`)).status, 200);
    // Only localhost and the address the listener is on; an empty or missing Host is refused
    // (HTTP/1.0, which no browser speaks, may leave it out).
    assert.equal((await withHost(url, '/warmslot/status', `127.0.0.1:${s.ws.port}`)).status, 200);
    assert.equal((await withHost(url, '/warmslot/status', `[::1]:${s.ws.port}`)).status, 421);
    assert.equal((await withHost(url, '/warmslot/status', `127.0.0.2:${s.ws.port}`)).status, 421);
    assert.equal(statusOf(await raw(s.ws.port, 'GET /health HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n')), 421);
    assert.equal(statusOf(await raw(s.ws.port, 'GET /health HTTP/1.1\r\nConnection: close\r\n\r\n')), 421);
    assert.match(await raw(s.ws.port, 'GET /health HTTP/1.0\r\n\r\n'), /^HTTP\/1\.[01] 200/);

    // Data answers are never cached nor sniffed.
    for (const r of [await fetch(`${url}/warmslot/status`), await fetch(`${url}/metrics`),
      await fetch(`${url}/admin/snapshot`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }),
      await fetch(`${url}/nowhere`)]) {
      assert.equal(r.headers.get('cache-control'), 'no-store', r.url);
      assert.equal(r.headers.get('x-content-type-options'), 'nosniff', r.url);
      await r.arrayBuffer();
    }
  } finally {
    await s.stop();
  }
});

test('control characters from clients reach neither the access log nor `warmslot status` raw; key-less endpoints read no body', { timeout: 300000 }, async () => {
  const s = await setup('timeouts:\n  body_read: 60s\n');
  try {
    // UTF-8 U+009B (CSI) and U+009D (OSC), an ESC and a raw 0x9b byte in the target.
    // (C0 characters cannot be in a request target: the HTTP parser refuses them.)
    const target = '/v1/\xc2\x9b2J\xc2\x9d0;pwned\x9bx';
    const answer = await raw(s.ws.port, `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    assert.equal(statusOf(answer), 404);
    await waitFor('the access line', () => fs.readFileSync(s.ws.logFile, 'latin1').includes('pwned'), 10000);
    // Read as UTF-8: a C1 character shows as U+0080..U+009F, a stray byte as U+FFFD.
    const unsafe = /[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]/;
    const log = fs.readFileSync(s.ws.logFile, 'utf8');
    const line = log.split('\n').find((l) => l.includes('pwned'));
    assert.ok(!unsafe.test(line), `raw control characters in: ${JSON.stringify(line)}`);
    assert.match(line, /GET \/v1\/\\u009b2J\\u009d0;pwned\\x9bx 404/);

    const status = spawnSync(warmslotBin(), ['status', '--url', s.ws.url], { encoding: 'utf8', env: { ...process.env, WARMSLOT_API_KEY: '' } });
    assert.equal(status.status, 0, status.stderr);
    assert.match(status.stdout, /pwned/, 'the request is listed');
    // (The status JSON itself carries the stray byte as U+FFFD: printable.)
    assert.ok(!/[\x00-\x08\x0b-\x1f\x7f-\x9f]/.test(status.stdout), 'raw control characters in the status output');
    assert.match(status.stdout, /\\u009b2J\\u009d0;pwned/);

    // A body declared to /health is never read: the answer comes at once, not after body_read.
    const started = Date.now();
    const health = await raw(s.ws.port, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n', 5000);
    assert.equal(statusOf(health), 200);
    assert.ok(Date.now() - started < 5000);
    const asset = await raw(s.ws.port, 'GET /warmslot/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n', 5000);
    assert.equal(statusOf(asset), 200);
  } finally {
    await s.stop();
  }
});

test('`warmslot status` sends $WARMSLOT_API_KEY, as the service installers write it', { timeout: 120000 }, async () => {
  const key = 'tenancy-status-key-0001';
  const s = await setup('', [key]);
  try {
    const env = { ...process.env, WARMSLOT_API_KEY: key };
    const r = spawnSync(warmslotBin(), ['status', '--url', s.ws.url, '--json'], { encoding: 'utf8', env });
    assert.equal(r.status, 0, r.stderr);
    assert.ok(JSON.parse(r.stdout).backends);
    const wrong = spawnSync(warmslotBin(), ['status', '--url', s.ws.url], { encoding: 'utf8', env: { ...process.env, WARMSLOT_API_KEY: 'some-other-key-1' } });
    assert.equal(wrong.status, 1);
    assert.match(wrong.stderr, /401/);
  } finally {
    await s.stop();
  }
});

const supervisedLog = (ws) => fs.readFileSync(ws.logFile, 'utf8');
const childPids = (ws) => [...supervisedLog(ws).matchAll(/started llama-server \(pid (\d+)\)/g)].map((m) => Number(m[1]));
const argsOf = (pid) => fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
const childKey = (pid) => fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')
  .find((e) => e.startsWith('LLAMA_API_KEY='))?.slice('LLAMA_API_KEY='.length);

// One HTTP request over a UNIX socket.
const unixRequest = (socket, method, target, body) => getJson(`unix:${socket}${target}`,
  body ? { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : { method });

test('a supervised llama-server takes only warmslot\'s own key, on a socket in a private directory', { timeout: 300000 }, async () => {
  const command = [llamaServerBin(), '-m', modelPath('llama'), '-c', '16384', '-np', '2', '-t', '2'];
  const ws = await startWarmslot({
    backends: [{ name: 'sup', command }],
    extra: `${routingFast}cache:\n  dir: ${tempDir('state')}\n`,
  });
  try {
    await waitFor('the supervised backend to be routed', async () => {
      const h = await getJson(`${ws.url}/health`);
      return h.body.backends?.[0]?.status === 'ok' && h.body.backends[0].routing;
    }, 120000, 100);
    const [pid] = childPids(ws);
    const args = argsOf(pid);
    assert.ok(!args.includes('--api-key'), 'the key is not on the command line');
    assert.ok(!args.includes('--port'), 'no TCP port');
    const socket = args[args.indexOf('--host') + 1];
    assert.match(socket, /\.sock$/);
    const dir = fs.statSync(path.dirname(socket));
    assert.equal(dir.mode & 0o777, 0o700, 'only warmslot\'s user enters the directory');
    assert.equal(dir.uid, process.getuid());
    assert.ok(fs.lstatSync(socket).isSocket());
    // Whoever reaches the socket (warmslot's user): no key, no slot actions, no completions.
    assert.equal((await unixRequest(socket, 'GET', '/slots')).status, 401);
    assert.equal((await unixRequest(socket, 'POST', '/slots/0?action=erase')).status, 401);
    assert.equal((await unixRequest(socket, 'POST', '/v1/chat/completions', chat('x', 'y'))).status, 401);
    // warmslot itself sends the key.
    const r = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi'));
    assert.equal(r.status, 200, JSON.stringify(r.body));
  } finally {
    const left = childPids(ws);
    await ws.stop();
    for (const p of left) { try { process.kill(-p, 'SIGKILL'); } catch { /* gone */ } }
  }
});

test('warmslot is not dumpable: a process of its own user cannot read its keys in /proc', { timeout: 60000 }, async () => {
  const dir = tempDir('dumpable');
  fs.chmodSync(dir, 0o777);  // as root the test runs warmslot as nobody, who writes here
  fs.mkdirSync(path.join(dir, 'cache'), { mode: 0o777 });
  fs.chmodSync(path.join(dir, 'cache'), 0o777);
  const configFile = path.join(dir, 'warmslot.yaml');
  fs.writeFileSync(configFile, `listen: 127.0.0.1:0\nbackends:\n  - name: b\n    url: http://127.0.0.1:9\n` +
    `api_keys: ["\${WARMSLOT_API_KEY}"]\ncache:\n  dir: ${dir}/cache\n`);
  const secret = 'dumpable-secret-key-0001';
  // Another process of warmslot's user (its llama-server, say). As root every /proc file is
  // readable, so both run as nobody then.
  const asUser = process.getuid() === 0 ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'] : [];
  const [cmd, ...args] = [...asUser, warmslotBin(), '--config', configFile];
  const logFile = path.join(dir, 'warmslot.log');
  const proc = startProcess(cmd, args, { logFile, env: { WARMSLOT_API_KEY: secret } });
  try {
    await waitFor('warmslot to listen', () => {
      if (!proc.running) throw new Error(`warmslot exited: ${fs.readFileSync(logFile, 'utf8')}`);
      return /warmslot listening on/.test(fs.readFileSync(logFile, 'utf8'));
    }, 20000);
    const [rcmd, ...rargs] = [...asUser, 'cat', `/proc/${proc.child.pid}/environ`];
    const read = spawnSync(rcmd, rargs, { encoding: 'utf8' });
    assert.notEqual(read.status, 0, 'the environment was readable');
    assert.match(read.stderr, /Permission denied/);
    assert.ok(!read.stdout.includes(secret));
  } finally {
    await proc.stop();
  }
});

// Another local user's process that listens where the stopped backend listened (its TCP port,
// or its socket's path), records every request's Authorization header and answers like a
// llama-server that takes any key.
const impostorScript = `
const http = require('node:http');
const fs = require('node:fs');
const [where, log] = process.argv.slice(1);
const note = (line) => fs.appendFileSync(log, line + '\\n');
const srv = http.createServer((req, res) => {
  note('request ' + req.method + ' ' + req.url + ' auth=' + (req.headers.authorization ?? '-'));
  res.setHeader('content-type', 'application/json');
  res.end(req.url.startsWith('/props') ? '{"total_slots":1,"default_generation_settings":{"n_ctx":4096},"model_path":"m.gguf","build_info":"b1"}' : '{}');
});
srv.on('error', (e) => { note('refused ' + e.code); process.exit(0); });
if (/^\\d+$/.test(where)) srv.listen(Number(where), '127.0.0.1', () => note('listening'));
else srv.listen(where, () => note('listening'));
`;

test('a local user who takes a stopped supervised backend\'s address never gets its key; each start has a new key',
  { timeout: 300000, skip: process.getuid() !== 0 && 'needs root to run a process as another user' }, async () => {
  const command = [llamaServerBin(), '-m', modelPath('llama'), '-c', '8192', '-np', '2', '-t', '2'];
  const ws = await startWarmslot({
    backends: [{ name: 'lazy', command, lines: ['start: on_demand', 'idle_stop: 1s', 'start_timeout: 20s'] }],
    extra: `${routingFast}cache:\n  dir: ${tempDir('state')}\n`,
  });
  const dir = tempDir('impostor');
  fs.chmodSync(dir, 0o777);
  const log = path.join(dir, 'impostor.log');
  let impostor;
  try {
    const first = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi'));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    const [pid] = childPids(ws);
    const args = argsOf(pid);
    const firstKey = childKey(pid);
    assert.ok(firstKey);
    const where = args.includes('--port') ? args[args.indexOf('--port') + 1] : args[args.indexOf('--host') + 1];
    await waitFor('the idle backend to stop', () => /stopped llama-server \(pid \d+, idle\)/.test(supervisedLog(ws)), 30000, 50);
    // nobody, reading warmslot's command line in /proc as every local user can, takes the address.
    impostor = startProcess('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', process.execPath, '-e', impostorScript, where, log],
      { logFile: path.join(dir, 'impostor.out') });
    await waitFor('the impostor to listen or be refused', () => fs.existsSync(log) && /listening|refused/.test(fs.readFileSync(log, 'utf8')), 10000);
    const r = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'A secret question?'));
    const seen = fs.readFileSync(log, 'utf8');
    assert.doesNotMatch(seen, /auth=Bearer/, 'the impostor received warmslot\'s key');
    assert.doesNotMatch(seen, /request/, 'the impostor received a request');
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const second = childPids(ws).at(-1);
    assert.notEqual(second, pid);
    const secondKey = childKey(second);
    assert.ok(secondKey);
    assert.notEqual(secondKey, firstKey, 'a new process gets a new key');
  } finally {
    if (impostor) await impostor.stop();
    const left = childPids(ws);
    await ws.stop();
    for (const p of left) { try { process.kill(-p, 'SIGKILL'); } catch { /* gone */ } }
  }
});

test('run.sh installs only what building and running need; the cluster\'s HAProxy is not run as root and keeps its stats closed', () => {
  const run = fs.readFileSync(path.join(repoRoot, 'deploy/run.sh'), 'utf8');
  assert.match(run, /bash deploy\/install-deps\.sh --run\n/);
  const listed = spawnSync('bash', [path.join(repoRoot, 'deploy/install-deps.sh'), '--run', '--list'], { encoding: 'utf8' });
  assert.equal(listed.status, 0, listed.stderr);
  const packages = listed.stdout.split(/\s+/).filter(Boolean);
  for (const needed of ['cmake', 'libboost1.81-dev', 'libyaml-cpp-dev', 'libsqlite3-dev']) assert.ok(packages.includes(needed), needed);
  for (const extra of ['nginx-light', 'haproxy', 'lintian', 'debhelper', 'mmdebstrap', 'clang', 'doctest-dev']) {
    assert.ok(!packages.includes(extra), `${extra} is installed for the demo`);
  }
  const all = spawnSync('bash', [path.join(repoRoot, 'deploy/install-deps.sh'), '--list'], { encoding: 'utf8' });
  assert.ok(all.stdout.split(/\s+/).includes('haproxy'), 'the full list still has the test tools');

  const cfg = fs.readFileSync(path.join(repoRoot, 'deploy/cluster/haproxy.cfg'), 'utf8');
  const section = (name) => cfg.split(/\n(?=\S)/).find((s) => s.startsWith(name)) ?? '';
  assert.match(section('global'), /^\s+user haproxy$/m);
  assert.match(section('global'), /^\s+group haproxy$/m);
  assert.match(section('global'), /^\s+chroot \/var\/lib\/haproxy$/m);
  assert.doesNotMatch(section('frontend llm'), /stats/, 'no stats page on the client frontend');
  const stats = section('listen stats');
  assert.match(stats, /^\s+bind 127\.0\.0\.1:\d+$/m, 'stats on loopback only');
  // HAProxy accepts it as shipped for real hosts (no namespaces there).
  const haproxy = spawnSync('haproxy', ['-v'], { encoding: 'utf8' });
  if (haproxy.status === 0) {
    const dir = tempDir('haproxy');
    const file = path.join(dir, 'haproxy.cfg');
    fs.writeFileSync(file, cfg.replaceAll(' namespace wsc-lb', ''));
    const check = spawnSync('haproxy', ['-c', '-f', file], { encoding: 'utf8' });
    assert.equal(check.status, 0, check.stdout + check.stderr);
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('tenant limits: a tenant over concurrent_requests gets 429 in its API\'s shape; another tenant is served', { timeout: 300000 }, async (t) => {
  const s = await setup(`${keyLines}tenants:\n  limits:\n    concurrent_requests: 1\n`);
  const held = new AbortController();
  try {
    const url = s.ws.url;
    await waitFor('routing', async () => (await getJson(`${url}/health`, { headers: bearer(keys.admin) })).body.backends?.[0]?.routing, 30000);
    // a's one request in flight: a stream that generates for a while; its first event is read,
    // the rest waits.
    const started = Date.now();
    const stream = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST', signal: held.signal,
      headers: { 'content-type': 'application/json', ...bearer(keys.a) },
      body: JSON.stringify(chat('You are verbose.', 'Tell a long story.', { max_tokens: 2000, ignore_eos: true, stream: true })),
    });
    assert.equal(stream.status, 200);
    const reader = stream.body.getReader();
    await reader.read();
    const second = await postJson(`${url}/v1/chat/completions`, chat('You are terse.', 'Hi'), bearer(keys.a));
    assert.equal(second.status, 429, JSON.stringify(second.body));
    assert.equal(second.body.error.type, 'rate_limit_error');
    assert.match(second.body.error.message, /concurrent_requests: 1/);
    assert.equal(second.headers.get('retry-after'), '1');
    const messages = await postJson(`${url}/v1/messages`, { model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }] }, bearer(keys.a));
    assert.equal(messages.status, 429);
    assert.equal(messages.body.type, 'error', 'the Anthropic shape on /v1/messages');
    assert.equal(messages.body.error.type, 'rate_limit_error');
    const other = await postJson(`${url}/v1/chat/completions`, chat('You are terse.', 'Hi'), bearer(keys.b));
    assert.equal(other.status, 200, 'another tenant is not held back');
    const checked = Date.now() - started;
    // The refusals came while a's stream still ran: it goes on to its end.
    let text = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString('utf8');
    }
    assert.match(text, /data: \[DONE\]/, 'the first stream ended normally');
    t.diagnostic(`checks done ${checked} ms after the stream began, stream lasted ${Date.now() - started} ms`);
    // Its place is free again.
    const after = await postJson(`${url}/v1/chat/completions`, chat('You are terse.', 'Hi'), bearer(keys.a));
    assert.equal(after.status, 200, JSON.stringify(after.body));
  } finally {
    held.abort();
    await s.stop();
  }
});

test('a request that restores into a slot holding another tenant\'s prefix pays for saving that prefix first', { timeout: 300000 }, async () => {
  const llama = await startLlama({ slots: 1, ctx: 16384 });
  let ws;
  try {
    // Stable messages are saved on their second use: a's single use leaves its slot unsaved.
    ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
      extra: `${routingFast}cache:\n  min_prefix_tokens: 1024\n  snapshot_after_uses: 2\n${keyLines}` });
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`, { headers: bearer(keys.admin) })).body.backends?.[0]?.routing, 30000);
    const ask = async (key, doc) => {
      const r = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'Hi'), bearer(key));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.headers.get('x-warmslot-disk') ?? '';
    };
    const rows = () => execFileSync('sqlite3', ['-separator', '|', path.join(llama.saveDir, 'warmslot-index.sqlite'),
      'SELECT tenant, tokens FROM snapshots ORDER BY rowid;'], { encoding: 'utf8' }).split('\n').filter(Boolean)
      .map((l) => { const [tenant, tokens] = l.split('|'); return { tenant, tokens: Number(tokens) }; });
    const docB = makeDocument(2801, 5000);
    // b's document on disk (an admin's warm-up: the admin's tenant pays for it).
    const warm = await postJson(`${ws.url}/admin/warm`, { model: 'm', system: docB }, bearer(keys.admin));
    assert.equal(warm.status, 200, JSON.stringify(warm.body));
    assert.equal(await ask(keys.a, makeDocument(2802, 5000)), '');  // a's, in the one slot only
    assert.match(await ask(keys.b, docB), /^restored \d+ tokens/);  // a's prefix saved first
    const charged = rows().filter((r) => r.tenant !== '');
    assert.equal(charged.length, 1, JSON.stringify(rows()));
    assert.ok(charged[0].tokens > 1000);
    assert.equal(charged[0].tenant, 'b', 'the save of a\'s prefix is charged to b, who asked for the restore');
  } finally {
    await ws?.stop();
    await llama.stop();
  }
});

test('disk budget: a tenant filling its own budget deletes its own files, never another tenant\'s', { timeout: 300000 }, async () => {
  // Every document below makes a slot file of about 4.7 MB (4,500 tokens of the tiny llama
  // model, about 1,040 bytes a token): b's budget holds two, max_disk four.
  const docBytes = 4500;
  const s = await setup(`${keyLines}cache:\n  min_prefix_tokens: 1024\n  max_disk: 20MiB\n  tenant_max_disk:\n    b: 10MiB\n`, undefined, { disk: true });
  try {
    await waitFor('routing', async () => (await getJson(`${s.ws.url}/health`, { headers: bearer(keys.admin) })).body.backends?.[0]?.routing, 30000);
    const ask = async (key, doc) => {
      const r = await postJson(`${s.ws.url}/v1/chat/completions`, chat(doc, 'Which line comes first?'), bearer(key));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      return r.headers.get('x-warmslot-disk') ?? '';
    };
    const rows = () => execFileSync('sqlite3', ['-separator', ' ', path.join(s.llama.saveDir, 'warmslot-index.sqlite'),
      'SELECT key, tenant, bytes FROM snapshots ORDER BY key;'], { encoding: 'utf8' })
      .trim().split('\n').filter(Boolean).map((l) => { const [key, tenant, bytes] = l.split(' '); return { key, tenant, bytes: Number(bytes) }; });
    assert.match(await ask(keys.a, makeDocument(900, docBytes)), /^snapshot \d+ tokens$/);
    const [ofA] = rows();
    assert.equal(ofA.tenant, 'a');
    // b fills its budget several times over: six documents of its own.
    for (let i = 0; i < 6; i++) assert.match(await ask(keys.b, makeDocument(910 + i, docBytes)), /^snapshot \d+ tokens$/);
    const after = rows();
    const ofB = after.filter((r) => r.tenant === 'b');
    assert.ok(ofB.length < 6, `b's own files were evicted (${ofB.length} left)`);
    assert.ok(ofB.reduce((n, r) => n + r.bytes, 0) <= 10 * 1024 * 1024, 'b stays within its budget');
    assert.ok(after.some((r) => r.key === ofA.key), 'a\'s file is still there');
    assert.ok(fs.existsSync(path.join(s.llama.saveDir, `ws-${ofA.key}.bin`)));

    // Status: a client sees its own tenant's files only, and no key or file name at all.
    const filesSeen = async (key) => {
      const r = await getJson(`${s.ws.url}/warmslot/status`, { headers: bearer(key) });
      assert.equal(r.status, 200);
      return { text: JSON.stringify(r.body), files: r.body.disk.dirs.flatMap((d) => d.files) };
    };
    const byA = await filesSeen(keys.a);
    assert.equal(byA.files.length, 1);
    assert.equal(byA.files[0].key, null);
    assert.equal(byA.files[0].file, null);
    const byB = await filesSeen(keys.b);
    assert.equal(byB.files.length, ofB.length);
    for (const r of after) {
      assert.ok(!byA.text.includes(r.key) && !byB.text.includes(r.key), 'a key in a client\'s status');
    }
    const byAdmin = await filesSeen(keys.admin);
    assert.equal(byAdmin.files.length, after.length);
    assert.ok(byAdmin.text.includes(ofA.key));
  } finally {
    await s.stop();
  }
});
