// Operations: the config file edited while warmslot runs, and an orderly stop with streams in
// flight. Real llama-server processes on the tiny model.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { readSse, startWarmslot, yamlConfig } from './lib/warmslot.mjs';

const keyOld = 'sk-before-the-edit-0001';
const keyNew = 'sk-after-the-edit-0002';
let first;
let second;

before(async () => {
  [first, second] = await Promise.all([
    // Room for long answers: the streams below must outlast a reload on a fast machine.
    startLlama({ arch: 'llama', slots: 2, ctx: 32768 }),
    startLlama({ arch: 'llama', slots: 2, ctx: 32768 }),
  ]);
});

after(async () => {
  await first?.stop();
  await second?.stop();
});

const bearer = (key) => ({ authorization: `Bearer ${key}` });
const logText = (ws) => fs.readFileSync(ws.logFile, 'utf8');
const count = (text, needle) => text.split(needle).length - 1;

// A long stream: generation ignores end-of-sequence, so it runs until max_tokens.
async function openStream(ws, key, maxTokens = 10000) {
  const res = await fetch(`${ws.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...bearer(key) },
    body: JSON.stringify({
      messages: [{ role: 'user', content: 'Count forever.' }], stream: true,
      max_tokens: maxTokens, ignore_eos: true, temperature: 0,
    }),
  });
  assert.equal(res.status, 200);
  const stream = { events: 0, done: false, finish: null };
  let sawFirst;
  const firstEvent = new Promise((resolve) => { sawFirst = resolve; });
  stream.finished = readSse(res, (data) => {
    if (data === '[DONE]') { stream.done = true; return; }
    const ev = JSON.parse(data);
    stream.events += 1;
    stream.finish = ev.choices?.[0]?.finish_reason ?? stream.finish;
    sawFirst();
  });
  // Awaited by the test; marked handled here so that a failed assertion before that await is
  // what the test reports, not the stream cut when warmslot stops.
  stream.finished.catch(() => {});
  await firstEvent;
  return stream;
}

// The file is replaced whole (written aside, then renamed), and what is awaited is the outcome
// of the SIGHUP, which reads the file after the rename: the file watcher may also reload, and on
// a loaded machine a plain rewrite can show it a truncated file for a moment.
async function reloadWith(ws, yaml) {
  const before = count(logText(ws), '(SIGHUP)');
  const aside = `${ws.configFile}.new`;
  fs.writeFileSync(aside, yaml);
  fs.renameSync(aside, ws.configFile);
  ws.proc.child.kill('SIGHUP');
  await waitFor('the reload to be logged', () => count(logText(ws), '(SIGHUP)') > before, 10000);
}

test('a config edit during a stream: the stream completes, the next request uses the new config', async () => {
  const ws = await startWarmslot({ backends: [{ name: 'first', url: first.url }], apiKeys: [keyOld] });
  try {
    const stream = await openStream(ws, keyOld);
    await reloadWith(ws, yamlConfig({ backends: [{ name: 'second', url: second.url }], apiKeys: [keyNew] }));
    assert.match(logText(ws), /backend first .*removed, draining/);
    assert.match(logText(ws), /backend second .*added/);
    assert.equal(stream.done, false, 'the stream was still running when the new config took over');

    await stream.finished;
    assert.equal(stream.done, true);
    assert.equal(stream.finish, 'length');

    const refused = await postJson(`${ws.url}/v1/chat/completions`,
      { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }, bearer(keyOld));
    assert.equal(refused.status, 401);
    assert.equal(refused.body.error.type, 'authentication_error');

    await waitFor('the new backend to be healthy', async () => {
      const h = await getJson(`${ws.url}/health`, { headers: bearer(keyNew) });
      return h.body.backends?.length === 1 && h.body.backends[0].name === 'second' &&
        h.body.backends[0].status === 'ok';
    }, 20000);
    const served = await postJson(`${ws.url}/v1/chat/completions`,
      { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }, bearer(keyNew));
    assert.equal(served.status, 200);
    assert.equal(served.headers.get('x-warmslot-backend'), 'second');
  } finally {
    await ws.stop();
  }
});

test('an invalid edit is rejected with file, line and key, and the running config stays', async () => {
  const ws = await startWarmslot({ backends: [{ name: 'first', url: first.url }], apiKeys: [keyOld] });
  try {
    const broken = `${yamlConfig({ backends: [{ name: 'first', url: first.url }], apiKeys: [keyNew] })}` +
      'limits:\n  max_body_bytez: 1MiB\n';
    await reloadWith(ws, broken);
    const line = broken.split('\n').findIndex((l) => l.includes('max_body_bytez')) + 1;
    const log = logText(ws);
    assert.match(log, /config reload \(SIGHUP\) rejected, the running config stays/);
    assert.ok(log.includes(`${ws.configFile}:${line}: limits.max_body_bytez`), log.split('\n').slice(-5).join('\n'));

    const served = await postJson(`${ws.url}/v1/chat/completions`,
      { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }, bearer(keyOld));
    assert.equal(served.status, 200);
    const refused = await postJson(`${ws.url}/v1/chat/completions`,
      { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }, bearer(keyNew));
    assert.equal(refused.status, 401);
  } finally {
    await ws.stop();
  }
});

test('SIGTERM with streams in flight: no new connections, the streams finish, exit 0', async () => {
  const ws = await startWarmslot({ backends: [{ name: 'first', url: first.url }], apiKeys: [keyOld],
    // A grace long enough for two 6,000-token streams on a loaded 2-core machine: what is
    // tested is that they finish, not how fast.
    extra: 'timeouts:\n  shutdown_grace: 600s\n' });
  const streams = await Promise.all([openStream(ws, keyOld, 6000), openStream(ws, keyOld, 6000)]);
  ws.proc.child.kill('SIGTERM');
  await waitFor('warmslot to stop accepting', async () => {
    const r = await fetch(`${ws.url}/health`).catch(() => null);
    return r === null;
  }, 10000);
  assert.ok(streams.every((s) => !s.done), 'the streams were still running at SIGTERM');
  await Promise.all(streams.map((s) => s.finished));
  for (const s of streams) {
    assert.equal(s.done, true);
    assert.equal(s.finish, 'length');
  }
  assert.deepEqual(await ws.proc.exited, { code: 0, signal: null });
  await ws.stop().catch(() => {});
});

test('the config file is watched: an edit takes effect without a signal', async () => {
  const ws = await startWarmslot({ backends: [{ name: 'first', url: first.url }], apiKeys: [keyOld] });
  try {
    // Editors save by writing a new file and renaming it over the old one.
    const tmp = `${ws.configFile}.tmp`;
    fs.writeFileSync(tmp, yamlConfig({ backends: [{ name: 'first', url: first.url }], apiKeys: [keyNew] }));
    fs.renameSync(tmp, ws.configFile);
    await waitFor('the watcher to reload', () => /config reloaded from .* \(file changed\)/.test(logText(ws)), 10000);
    const served = await postJson(`${ws.url}/v1/chat/completions`,
      { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }, bearer(keyNew));
    assert.equal(served.status, 200);
  } finally {
    await ws.stop();
  }
});
