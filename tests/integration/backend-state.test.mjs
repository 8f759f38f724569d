// warmslot's picture of a backend at every change: a request sent the moment a restarted
// llama-server answers /health is planned on what the restarted server holds (and its prefix
// restored from disk), a model file replaced at the same path gets new slot-file keys, and
// requests sent while warmslot starts on a busy machine wait for routing instead of failing over.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { assertOnlyQuestionComputed, getJson, modelPath, postJson, restartLlama, snapshotFiles, startLlama } from './lib/llama.mjs';
import { tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { askChat as ask, diskSettings as settings } from './lib/ask.mjs';
import { chat, makeDocument } from './lib/text.mjs';

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: a request sent as soon as a restarted backend answers /health gets its prefix restored`, { timeout: 400000 }, async () => {
    let llama = await startLlama({ arch, slots: 2, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    try {
      const doc = makeDocument(700, 12000);
      const first = await ask(ws, doc, 'What is on the first line?');
      assert.match(first.disk, /^snapshot \d+ tokens$/, JSON.stringify(first));
      // restartLlama returns as soon as /health answers 200 (polled every 50 ms): no pause.
      llama = await restartLlama(llama);
      const q = 'And what is on the last line?';
      const after = await ask(ws, doc, q);
      assert.match(after.disk, /^restored \d+ tokens$/, JSON.stringify(after));
      assert.notEqual(after.route, 'failover');
      await assertOnlyQuestionComputed(after, llama.url, q);
      // Either the request waited for a check of the backend, or the monitor's own poll had
      // already seen the new process (routing turned on again) before the request came.
      const log = fs.readFileSync(ws.logFile, 'utf8');
      const lastLine = log.trimEnd().split('\n').filter((l) => /access: req=/.test(l)).pop();
      const before = log.slice(0, log.indexOf(lastLine));
      assert.ok(/waited="(readiness|restart check) \d+ms/.test(lastLine) ||
        (before.match(/cache-aware routing on/g) ?? []).length >= 2, log);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

// A restart between two checks a minute apart, where llama-server closes the connection after
// each streamed answer, so no pooled connection dies under the next request: the connection
// warmslot's monitor keeps open to the backend closes when the process ends, and the backend is
// checked at once. The first request after the restart is planned on what the new process holds
// (its document restored), and so is the next one.
test('a restart between two checks is seen when the process ends: both documents are restored after it', { timeout: 400000 }, async () => {
  let llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: 'routing:\n  reconcile_interval: 60s\ncache:\n  min_prefix_tokens: 1024\n' });
  const streamed = async (doc, q) => {
    const r = await fetch(`${ws.url}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat(doc, q, { stream: true })) });
    assert.equal(r.status, 200);
    const text = await r.text();
    assert.match(text, /data: \[DONE\]/);
  };
  const computed = async () => Number((await (await fetch(`${llama.url}/metrics`)).text())
    .match(/^llamacpp:prompt_tokens_total (\d+)/m)[1]);
  try {
    const docs = [makeDocument(721, 6000), makeDocument(722, 6000)];
    for (const d of docs) await streamed(d, 'What is on the first line?');
    await waitFor('both documents on disk', () => snapshotFiles(llama.saveDir).length === 2, 30000);
    llama = await restartLlama(llama);
    const q0 = 'Which word comes last?';
    await streamed(docs[0], q0);
    await assertOnlyQuestionComputed({ processed: await computed() }, llama.url, q0,
      'the first document after the restart: ');
    const before = await computed();
    const q = 'How many lines are there?';
    await streamed(docs[1], q);
    await assertOnlyQuestionComputed({ processed: (await computed()) - before }, llama.url, q,
      'the second document after the restart: ');
    const log = fs.readFileSync(ws.logFile, 'utf8');
    assert.match(log, /(restarted \(its task numbers began again\)|answers again)/);
    // Planned as what it is, a document in no slot, and restored as such (not as a slot that
    // "holds it and more" whose rollback recomputed everything).
    const last = log.trimEnd().split('\n').filter((l) => /access: req=/.test(l)).pop();
    assert.match(last, /route="miss; reason=[a-z_]+" .*disk="restored \d+ tokens"/, last);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

// A request sent while the backend is down (its process restarting, the model loading) waits
// for it rather than failing (502) or being sent unplanned the moment it answers (which computes
// the whole prompt): it is planned on what the new process holds, and its document restored.
test('a request sent while its only backend is down waits for it and gets its prefix restored', { timeout: 400000 }, async () => {
  let llama = await startLlama({ arch: 'qwen35', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
  try {
    const doc = makeDocument(731, 12000);
    const first = await ask(ws, doc, 'What is on the first line?');
    assert.match(first.disk, /^snapshot \d+ tokens$/, JSON.stringify(first));
    await llama.stop();
    const q = 'And what is on the last line?';
    const pending = ask(ws, doc, q);
    await new Promise((r) => setTimeout(r, 1500));
    llama = await startLlama({ arch: llama.arch, slots: llama.slots, ctx: llama.ctx, extra: llama.extra,
      slotSaveDir: llama.saveDir, port: llama.port, pin: llama.pin });
    const after = await pending;
    assert.match(after.disk, /^restored \d+ tokens$/, JSON.stringify(after));
    assert.match(after.route, /^miss/, JSON.stringify(after));
    await assertOnlyQuestionComputed(after, llama.url, q);
    const log = fs.readFileSync(ws.logFile, 'utf8');
    const lastLine = log.trimEnd().split('\n').filter((l) => /access: req=/.test(l)).pop();
    assert.match(lastLine, /waited="([^"]*, )?(backend|restart) \d+ms[,"]/, lastLine);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('a model file replaced at the same path gets new keys: nothing restored, old files kept', { timeout: 400000 }, async () => {
  const dir = tempDir('model');
  const model = path.join(dir, 'model.gguf');
  fs.copyFileSync(modelPath('llama'), model);
  let llama = await startLlama({ model, slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
  try {
    const doc = makeDocument(701, 6000);
    assert.match((await ask(ws, doc, 'Q1?')).disk, /^snapshot \d+ tokens$/);
    const before = snapshotFiles(llama.saveDir);
    assert.equal(before.length, 1);
    await llama.stop();
    fs.copyFileSync(modelPath('qwen35'), model);  // another model, same path
    llama = await startLlama({ model, slots: 2, ctx: 16384, slotSaveDir: llama.saveDir, port: llama.port });
    const after = await ask(ws, doc, 'Q2?');
    assert.doesNotMatch(after.disk, /restore/, 'no file of the old model is restored');
    // A new prefix for the new model: primed from scratch and saved under its own key.
    assert.match(after.disk, /^snapshot \d+ tokens$/);
    const metrics = await (await fetch(`${llama.url}/metrics`)).text();
    const computed = Number(metrics.match(/llamacpp:prompt_tokens_total (\d+)/)[1]);
    assert.ok(computed >= 5000, `the new server computed the document (${computed} prompt tokens)`);
    for (const f of before) assert.ok(fs.existsSync(path.join(llama.saveDir, f)), `${f} is still on disk`);
    assert.equal(snapshotFiles(llama.saveDir).length, 2);
  } finally {
    await ws.stop();
    await llama.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// deploy/demo-client.mjs: a 120-line document and two questions.
const demoDoc = Array.from({ length: 120 }, (_, i) =>
  `Line ${i + 1}: the harbour ledger records lanterns, violins and compasses shipped that day.`).join('\n');
const demoBody = (question) => ({
  messages: [{ role: 'system', content: `Answer from this document:\n${demoDoc}` },
    { role: 'user', content: question }],
  max_tokens: 16, temperature: 0,
});

test('on a busy machine, the demo\'s second question is a hit even when sent as soon as warmslot listens', { timeout: 400000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const loaders = [0, 1].map(() => spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
  let ws;
  try {
    ws = await startWarmslot({ backends: [{ name: 'local', url: llama.url, slotSaveDir: llama.saveDir }] });
    const routes = [];
    for (const q of ['Which items does the ledger record?', 'On which line is the ledger first mentioned?']) {
      const r = await postJson(`${ws.url}/v1/chat/completions`, demoBody(q));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      routes.push(r.headers.get('x-warmslot-route'));
    }
    assert.notEqual(routes[0], 'failover');
    assert.equal(routes[1], 'hit', `routes: ${routes.join(', ')}`);
    const health = await getJson(`${ws.url}/health`);
    assert.equal(health.body.backends[0].routing, true);
  } finally {
    for (const l of loaders) l.kill('SIGKILL');
    if (ws) await ws.stop();
    await llama.stop();
  }
});
