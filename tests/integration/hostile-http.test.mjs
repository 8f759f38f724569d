// What hostile or broken HTTP clients can do to the warmslot process, measured on the process
// itself: its memory under an endless chunk extension, its CPU when file descriptors run out,
// its drain on SIGTERM, and its answers to HTTP/1.0 clients.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { startLlama } from './lib/llama.mjs';
import { startProcess, tempDir, waitFor, freePort } from './lib/procs.mjs';
import { readSse, startWarmslot, warmslotBin, yamlConfig } from './lib/warmslot.mjs';
import { chat } from './lib/text.mjs';

const rssKiB = (pid) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/)[1]);
// Nanoseconds the process's threads spent on a CPU or waiting for one (runnable): a thread that
// spins counts all the time even on a machine busy with other work, an idle one none.
const busyNs = (pid) => fs.readdirSync(`/proc/${pid}/task`).reduce((sum, tid) => {
  try {
    const [run, wait] = fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ').map(Number);
    return sum + run + wait;
  } catch { return sum; }  // the thread ended meanwhile
}, 0);

// A raw client connection: what it received, whether the server ended it.
function connect(port) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    const c = { socket: s, data: '', ended: false, error: null };
    s.on('data', (d) => { c.data += d.toString('latin1'); });
    s.on('end', () => { c.ended = true; });
    s.on('close', () => { c.ended = true; });
    s.on('error', (e) => { c.error = e; c.ended = true; });
    s.once('connect', () => resolve(c));
    s.once('error', reject);
  });
}

const statusOf = (text) => Number(text.match(/^HTTP\/1\.[01] (\d{3})/)?.[1] ?? 0);
const headOf = (text) => text.slice(0, text.indexOf('\r\n\r\n') + 4);

test('an endless chunk extension is refused early and warmslot\'s memory stays flat', { timeout: 60000 }, async () => {
  const ws = await startWarmslot({ backends: [{ name: 'b', url: `http://127.0.0.1:${await freePort()}` }] });
  try {
    const pid = ws.proc.child.pid;
    const before = rssKiB(pid);
    const c = await connect(ws.port);
    c.socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
      'Transfer-Encoding: chunked\r\n\r\n1;');
    const piece = Buffer.alloc(64 * 1024, 'e');
    let sent = 0;
    let sentAtAnswer = null;  // warmslot drains what follows its answer (up to 16 MiB): not counted
    c.socket.once('data', () => { sentAtAnswer = sent; });
    let peak = before;
    while (sent < 64 * 1024 * 1024 && !c.ended && !c.data) {
      const ok = c.socket.write(piece);
      sent += piece.length;
      // Read what arrives between writes, as a client does: warmslot drains at most 16 MiB after
      // its answer, then closes, and a reset purges an answer the client had not read yet.
      await new Promise((r) => setImmediate(r));
      if (!ok) {
        await Promise.race([new Promise((r) => c.socket.once('drain', r)),
          waitFor('an answer', () => c.data || c.ended, 10000, 10).catch(() => {})]);
      }
      if (sent % (1024 * 1024) === 0) peak = Math.max(peak, rssKiB(pid));
    }
    await waitFor('the answer', () => c.data.includes('\r\n\r\n') || c.ended, 10000, 10);
    peak = Math.max(peak, rssKiB(pid));
    c.socket.destroy();
    assert.equal(statusOf(c.data), 400, c.data.slice(0, 300));
    assert.match(c.data, /chunk-size line or the trailer section/);
    assert.ok(sentAtAnswer !== null && sentAtAnswer < 16 * 1024 * 1024, `answered after ${sentAtAnswer} bytes`);
    assert.ok(peak - before < 16 * 1024, `RSS grew from ${before} to ${peak} KiB`);
  } finally {
    await ws.stop();
  }
});

test('out of file descriptors, warmslot waits instead of spinning, then serves again', { timeout: 60000 }, async () => {
  const dir = tempDir('fds');
  const configFile = path.join(dir, 'warmslot.yaml');
  fs.writeFileSync(configFile, yamlConfig({ backends: [{ name: 'b', url: `http://127.0.0.1:${await freePort()}` }],
    extra: 'cache:\n  enabled: false\n' }));
  const logFile = path.join(dir, 'warmslot.log');
  // Soft and hard limit both 64: warmslot raises the soft limit to the hard one at start.
  const proc = startProcess('prlimit', ['--nofile=64:64', warmslotBin(), '--config', configFile], { logFile });
  const conns = [];
  try {
    const url = await waitFor('warmslot to listen', () => {
      if (!proc.running) throw new Error(fs.readFileSync(logFile, 'utf8'));
      return fs.readFileSync(logFile, 'utf8').match(/warmslot listening on (http:\/\/[^\s]+)/)?.[1];
    }, 20000, 20);
    const port = Number(new URL(url).port);
    const pid = proc.child.pid;
    // Open kept-alive connections until one is not served: warmslot cannot accept it.
    let unserved = null;
    for (let i = 0; i < 100 && !unserved; i++) {
      const c = await connect(port);
      conns.push(c);
      c.socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
      const served = await waitFor('an answer', () => c.data.includes('\r\n\r\n'), 1000, 5).catch(() => false);
      if (!served) unserved = c;
    }
    assert.ok(unserved, 'the descriptor limit was reached');
    assert.ok(conns.length < 64, `${conns.length} connections`);
    const busy0 = busyNs(pid);
    const started = process.hrtime.bigint();
    await new Promise((r) => setTimeout(r, 1500));
    const busy = (busyNs(pid) - busy0) / Number(process.hrtime.bigint() - started);
    // A loop that retries accept at once keeps a thread running or runnable all the time.
    assert.ok(busy < 0.3, `busy ${busy.toFixed(2)} of the time with ${conns.length} connections`);
    for (const c of conns) if (c !== unserved) c.socket.destroy();
    await waitFor('the waiting connection to be served', () => unserved.data.includes('\r\n\r\n'), 10000, 10);
    const r = await fetch(`${url}/health`);
    assert.ok([200, 503].includes(r.status));
    await r.text();
    assert.ok(proc.running);
  } finally {
    for (const c of conns) c.socket.destroy();
    const r = await proc.stop('SIGTERM', 15000);
    assert.equal(r.code, 0, fs.readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n'));
  }
});

test('SIGTERM closes idle kept-alive connections at once, lets a running stream finish, then exits', { timeout: 180000 }, async () => {
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }],
    extra: 'timeouts:\n  shutdown_grace: 60s\n  client_idle: 120s\n' });
  let stopped = null;
  try {
    const idle = await connect(ws.port);
    idle.socket.write('GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n');
    await waitFor('the idle connection\'s answer', () => idle.data.includes('}'), 10000, 10);
    const res = await fetch(`${ws.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat('You are long-winded.', 'Tell a long story.',
        { stream: true, max_tokens: 2000, ignore_eos: true })) });
    assert.equal(res.status, 200);
    // The signal goes as soon as the stream's header is here: a long stream (seconds on the
    // tiny model) is still running when warmslot handles it, even when this client reads late.
    stopped = ws.proc.stop('SIGTERM', 60000);
    let events = 0;
    let done = false;
    let idleClosedAt = -1;
    const reading = readSse(res, (data) => {
      if (data === '[DONE]') done = true;
      else events++;
      if (events === 1) {
        // While this stream has 2,000 tokens to go, the idle connection must end.
        return waitFor('the idle connection to be closed', () => idle.ended, 10000, 5)
          .then(() => { idleClosedAt = events; }, () => {});
      }
      if (idle.ended && idleClosedAt < 0) idleClosedAt = events;
      return true;
    });
    await reading;
    assert.ok(done, 'the stream finished');
    assert.ok(events > 1000, `${events} events`);
    assert.ok(idle.ended, 'the idle connection was closed');
    assert.ok(idleClosedAt >= 0 && idleClosedAt < events, `idle closed at event ${idleClosedAt} of ${events}`);
    const r = await stopped;
    assert.equal(r.code, 0);
    idle.socket.destroy();
  } finally {
    if (!stopped) await ws.stop();
    await llama.stop();
  }
});

test('HTTP/1.0 clients get a Content-Length or a body that ends with the connection, never chunks', { timeout: 120000 }, async () => {
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }] });
  try {
    const health = await connect(ws.port);
    health.socket.write('GET /health HTTP/1.0\r\n\r\n');
    await waitFor('the end of the answer', () => health.ended, 10000, 10);
    const head = headOf(health.data);
    assert.ok([200, 503].includes(statusOf(head)), head);
    assert.match(head, /Content-Length: \d+/i);
    assert.doesNotMatch(head, /chunked/i);

    const body = JSON.stringify(chat('You are brief.', 'Hi', { stream: true, max_tokens: 8 }));
    const stream = await connect(ws.port);
    stream.socket.write(`POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    await waitFor('the end of the stream', () => stream.ended, 60000, 10);
    const shead = headOf(stream.data);
    assert.equal(statusOf(shead), 200, shead);
    assert.doesNotMatch(shead, /Transfer-Encoding/i);
    assert.doesNotMatch(shead, /Content-Length/i);
    assert.match(shead, /Connection: close/i);
    const sbody = stream.data.slice(shead.length);
    assert.ok(sbody.startsWith('data: '), sbody.slice(0, 100));
    assert.ok(sbody.endsWith('data: [DONE]\n\n'), sbody.slice(-100));
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

// Writes `text` on a new connection and returns what came back once warmslot ended it.
async function exchangeRaw(port, text, { endAfterHead = false } = {}) {
  const c = await connect(port);
  c.socket.write(text);
  await waitFor('the answer', () => c.ended || (endAfterHead && c.data.includes('\r\n\r\n')), 15000, 10);
  c.socket.destroy();
  return c.data;
}

test('requests warmslot refuses itself are counted on /metrics and each has an access line', { timeout: 90000 }, async () => {
  const key = 'refusal-test-key';
  const ws = await startWarmslot({
    backends: [{ name: 'b', url: `http://127.0.0.1:${await freePort()}` }], apiKeys: [key],
    extra: 'limits:\n  max_header_count: 8\n  max_body_bytes: 1KiB\n  max_connections: 3\n' +
      'timeouts:\n  body_read: 1s\n' });
  const metricsText = async () => {
    const data = await exchangeRaw(ws.port, `GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\n` +
      'Connection: close\r\n\r\n');
    assert.equal(statusOf(data), 200, data.slice(0, 300));
    return data;
  };
  const refused = (text, reason) =>
    Number(text.match(new RegExp(`^warmslot_requests_refused_total\\{reason="${reason}"\\} (\\d+)$`, 'm'))?.[1] ?? NaN);
  const held = [];
  try {
    const before = await metricsText();
    for (const r of ['headers_too_large', 'too_many_headers', 'body_too_large', 'bad_request',
      'chunk_line_too_long', 'body_timeout', 'unauthorized', 'too_many_connections']) {
      assert.equal(refused(before, r), 0, `${r} before`);
    }
    const post = 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n';
    const auth = `Authorization: Bearer ${key}\r\n`;
    // 431: headers over 16 KiB.
    assert.equal(statusOf(await exchangeRaw(ws.port, `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`)), 431);
    // 431: more than 8 fields.
    let fields = '';
    for (let i = 0; i < 10; i++) fields += `X-F${i}: v\r\n`;
    assert.equal(statusOf(await exchangeRaw(ws.port, `GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n${fields}\r\n`)), 431);
    // 413: a declared Content-Length over 1 KiB (the body is never sent).
    assert.equal(statusOf(await exchangeRaw(ws.port, `${post}${auth}Content-Length: 5000\r\n\r\n`, { endAfterHead: true })), 413);
    // 400: a malformed header line.
    assert.equal(statusOf(await exchangeRaw(ws.port, 'GET /health HTTP/1.1\r\nHost w\r\n\r\n')), 400);
    // 400: a chunk-size line over the buffer cap (16 KiB + 64 KiB).
    assert.equal(statusOf(await exchangeRaw(ws.port, `${post}${auth}Transfer-Encoding: chunked\r\n\r\n1;${'e'.repeat(100 * 1024)}`,
      { endAfterHead: true })), 400);
    // 408: half a body, then nothing for longer than timeouts.body_read.
    assert.equal(statusOf(await exchangeRaw(ws.port, `${post}${auth}Content-Length: 100\r\n\r\n{"model":`)), 408);
    // 401: a body without a key, refused on its header.
    assert.equal(statusOf(await exchangeRaw(ws.port, `${post}Content-Length: 2\r\n\r\n{}`, { endAfterHead: true })), 401);
    // 503: a fourth connection while three are open.
    for (let i = 0; i < 3; i++) held.push(await connect(ws.port));
    const over = await exchangeRaw(ws.port, 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', { endAfterHead: true });
    assert.equal(statusOf(over), 503, over.slice(0, 300));
    for (const c of held) c.socket.destroy();

    // The held connections close on warmslot's side asynchronously: retry until it serves.
    const after = await waitFor('/metrics', () => metricsText().catch(() => null), 10000, 100);
    for (const r of ['headers_too_large', 'too_many_headers', 'body_too_large', 'bad_request',
      'chunk_line_too_long', 'body_timeout', 'unauthorized', 'too_many_connections']) {
      assert.equal(refused(after, r), 1, `${r}:\n${after.split('\n').filter((l) => l.includes('refused')).join('\n')}`);
    }
    // One access line per refusal, naming the reason and the client, never a header value or key.
    const log = fs.readFileSync(ws.logFile, 'utf8');
    const lines = log.split('\n').filter((l) => / refused=/.test(l));
    for (const [reason, status] of [['headers_too_large', 431], ['too_many_headers', 431], ['body_too_large', 413],
      ['bad_request', 400], ['chunk_line_too_long', 400], ['body_timeout', 408], ['unauthorized', 401],
      ['too_many_connections', 503]]) {
      const mine = lines.filter((l) => l.includes(` refused=${reason} `));
      assert.equal(mine.length, 1, `${reason}:\n${lines.join('\n')}`);
      assert.match(mine[0], new RegExp(`req=[0-9a-f]+ .* ${status} backend=- .*peer=127\\.0\\.0\\.1:\\d+`), mine[0]);
    }
    assert.ok(!log.includes(key), 'the key is never logged');
    assert.ok(!log.includes('aaaaaaaa'), 'header values are never logged');
  } finally {
    for (const c of held) c.socket.destroy();
    await ws.stop();
  }
});
