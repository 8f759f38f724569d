// Admin endpoints against real llama-server processes: `warmslot warm` primes and saves a
// system prompt and documents ahead of time; POST /admin/snapshot saves what idle slots hold.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { assertOnlyQuestionComputed, getJson, postJson, restartLlama, snapshotFiles, startLlama } from './lib/llama.mjs';
import { tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot, warmslotBin } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';
const model = 'test-model';
const key = 'a-long-enough-admin-test-key';

// The CLI's exit code, stdout and stderr (a non-zero exit is a result, not a throw).
async function warmCli(args, env = {}) {
  try {
    const { stdout, stderr } = await promisify(execFile)(warmslotBin(), ['warm', ...args],
      { env: { ...process.env, ...env } });
    return { code: 0, stdout, stderr };
  } catch (e) {
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

// The layout warm-ups use (api/admin.hpp): system, one user message per document, question.
function askBody(system, documents, question) {
  return {
    model, max_tokens: 4, temperature: 0, seed: 42,
    messages: [{ role: 'system', content: system },
      ...documents.map((d) => ({ role: 'user', content: d })),
      { role: 'user', content: question }],
  };
}

async function ask(ws, body, headers = {}) {
  const r = await postJson(`${ws.url}/v1/chat/completions`, body, headers);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { disk: r.headers.get('x-warmslot-disk') ?? '', processed: r.body.timings.prompt_n };
}

async function routed(ws) {
  const headers = { authorization: `Bearer ${key}` };  // details need the key where one is set
  await waitFor('routing', async () => (await getJson(`${ws.url}/health`, { headers })).body.backends?.[0]?.routing, 30000);
}

const corrections = async (ws) =>
  Number((await (await fetch(`${ws.url}/metrics`, { headers: { authorization: `Bearer ${key}` } })).text()).match(/warmslot_belief_corrections_total (\d+)/)[1]);

async function restartBackend(ws, llama) {
  const before = await corrections(ws);
  const again = await restartLlama(llama);
  await waitFor('the restart to be noticed', async () => (await corrections(ws)) > before, 10000);
  return again;
}


for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: warmslot warm primes and saves documents; the first question and one after a restart process only the question`, { timeout: 300000 }, async () => {
    let llama = await startLlama({ arch, slots: 3, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
      extra: settings, apiKeys: [key] });
    try {
      await routed(ws);
      const dir = tempDir('warm');
      const system = 'You answer questions about the documents below.';
      const docs = [makeDocument(700, 3500), makeDocument(701, 3500)];
      fs.writeFileSync(path.join(dir, 'system.txt'), system);
      docs.forEach((d, i) => fs.writeFileSync(path.join(dir, `doc${i}.txt`), d));
      const args = ['--model', model, '--system', path.join(dir, 'system.txt'),
        '--doc', path.join(dir, 'doc0.txt'), '--doc', path.join(dir, 'doc1.txt'), '--url', ws.url];

      const noKey = await warmCli(args);
      assert.equal(noKey.code, 1);
      assert.match(noKey.stderr, /401: missing or invalid API key/);

      const warmed = await warmCli([...args, '--api-key-env', 'ADMIN_KEY', '--json'], { ADMIN_KEY: key });
      assert.equal(warmed.code, 0, warmed.stderr);
      const report = JSON.parse(warmed.stdout);
      assert.equal(report.saved, true, warmed.stdout);
      assert.ok(report.tokens >= 6500, `primed ${report.tokens} tokens`);
      assert.equal(snapshotFiles(llama.saveDir).length, 1);

      const auth = { authorization: `Bearer ${key}` };
      const q1 = 'What is on the first line of the second document?';
      const first = await ask(ws, askBody(system, docs, q1), auth);
      await assertOnlyQuestionComputed(first, llama.url, q1, 'first question ');

      const again = await warmCli([...args, '--api-key-env', 'ADMIN_KEY', '--json'], { ADMIN_KEY: key });
      assert.equal(again.code, 0, again.stderr);
      assert.equal(JSON.parse(again.stdout).reason, 'already on disk');

      llama = await restartBackend(ws, llama);
      const q2 = 'And what is on the last line?';
      const after = await ask(ws, askBody(system, docs, q2), auth);
      assert.match(after.disk, /^restored \d+ tokens$/);
      await assertOnlyQuestionComputed(after, llama.url, q2, 'after the restart ');
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: POST /admin/snapshot saves a prefix used fewer times than snapshot_after_uses; a restart then restores it`, { timeout: 300000 }, async () => {
    let llama = await startLlama({ arch, slots: 3, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
      extra: `${settings}  snapshot_after_uses: 5\n` });
    try {
      await routed(ws);
      const doc = makeDocument(710, 6000);
      assert.equal((await ask(ws, chat(doc, 'Q1?'))).disk, '', 'below snapshot_after_uses: no snapshot yet');
      assert.equal(snapshotFiles(llama.saveDir).length, 0);

      const bad = await postJson(`${ws.url}/admin/snapshot`, { backend: 'nope' });
      assert.equal(bad.status, 404);
      assert.equal(bad.body.error.type, 'not_found_error');
      assert.match(bad.body.error.message, /unknown backend "nope"/);

      const r = await postJson(`${ws.url}/admin/snapshot`, {});
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.saved.length, 1, JSON.stringify(r.body));
      assert.equal(r.body.saved[0].backend, 'b');
      assert.ok(r.body.saved[0].tokens >= 5000);
      assert.equal(r.body.skipped.length, 2, 'the two other slots hold nothing worth saving');
      for (const s of r.body.skipped) assert.match(s.reason, /no long stable prefix/);
      assert.equal(snapshotFiles(llama.saveDir).length, 1);

      const twice = await postJson(`${ws.url}/admin/snapshot`, { backend: 'b' });
      assert.equal(twice.body.saved.length, 0);
      assert.ok(twice.body.skipped.some((s) => s.reason === 'already on disk'));

      llama = await restartBackend(ws, llama);
      const q = 'What is on the last line?';
      const after = await ask(ws, chat(doc, q));
      assert.match(after.disk, /^restored \d+ tokens$/);
      await assertOnlyQuestionComputed(after, llama.url, q);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

test('a restore first saves the prefix its slot held when that is not on disk yet', { timeout: 300000 }, async () => {
  let llama = await startLlama({ arch: 'qwen35', slots: 1, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: `${settings}  snapshot_after_uses: 2\n` });
  try {
    await routed(ws);
    const [docA, docB] = [makeDocument(730, 6000), makeDocument(731, 6000)];
    assert.equal((await ask(ws, chat(docA, 'QA1?'))).disk, '', 'A used once: not saved yet');
    assert.equal((await postJson(`${ws.url}/admin/snapshot`, {})).body.saved.length, 1, 'A saved on demand');
    assert.equal((await ask(ws, chat(docB, 'QB1?'))).disk, '', 'B used once: not saved yet');
    assert.equal(snapshotFiles(llama.saveDir).length, 1);
    // A comes back from disk into the only slot, which holds B: B is saved before it goes.
    assert.match((await ask(ws, chat(docA, 'QA3?'))).disk, /^restored \d+ tokens$/);
    assert.equal(snapshotFiles(llama.saveDir).length, 2);
    llama = await restartBackend(ws, llama);
    const q = 'QB2?';
    const b = await ask(ws, chat(docB, q));
    assert.match(b.disk, /^restored \d+ tokens$/);
    await assertOnlyQuestionComputed(b, llama.url, q);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('POST /admin/snapshot never touches a busy slot', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: `${settings}  snapshot_after_uses: 5\n` });
  try {
    await routed(ws);
    const running = postJson(`${ws.url}/v1/chat/completions`,
      chat(makeDocument(720, 8000), 'Q?', { max_tokens: 64, ignore_eos: true }));
    await waitFor('the request to run', async () =>
      (await getJson(`${llama.url}/slots`)).body.some((s) => s.is_processing), 30000, 5);
    const during = await postJson(`${ws.url}/admin/snapshot`, {});
    const stillRunning = (await getJson(`${llama.url}/slots`)).body.some((s) => s.is_processing);
    const r = await running;
    assert.equal(r.status, 200);
    const slot = Number(r.headers.get('x-warmslot-slot'));
    assert.ok(stillRunning, 'the request outlived the admin call');
    assert.deepEqual(during.body.saved, []);
    assert.equal(during.body.skipped.find((s) => s.slot === slot).reason, 'busy');
    const after = await postJson(`${ws.url}/admin/snapshot`, {});
    assert.equal(after.body.saved.length, 1, JSON.stringify(after.body));
    assert.equal(after.body.saved[0].slot, slot);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('admin errors are OpenAI-shaped', { timeout: 120000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: settings });
  try {
    await routed(ws);
    const cases = [
      [`${ws.url}/admin/warm`, { model }, 400, /nothing to warm/],
      [`${ws.url}/admin/warm`, { model, system: 'too short to be worth a file' }, 400, /min_prefix_tokens/],
      [`${ws.url}/admin/snapshot`, { backend: 3 }, 400, /"backend" must be a string/],
      [`${ws.url}/admin/nothing`, {}, 404, /unknown endpoint/],
    ];
    for (const [url, body, status, message] of cases) {
      const r = await postJson(url, body);
      assert.equal(r.status, status, `${url} ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, status);
      assert.match(r.body.error.message, message);
    }
    const get = await getJson(`${ws.url}/admin/snapshot`);
    assert.equal(get.status, 405);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
