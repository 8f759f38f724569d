// What a slot's KV means, kept true: KV a request computed with its own adapter is never reused
// or saved as the base model's; KV-changing settings from the environment make new slot-file
// keys; a restore that fails because the KV cache has no free cells keeps its good file; a
// backend restarted with the same identity loses its slot beliefs, however warmslot notices.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { getJson, llamaServerBin, modelPath, postJson, questionTokens, restartLlama, snapshotFiles, startLlama } from './lib/llama.mjs';
import { runScript, tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { askChat, diskSettings } from './lib/ask.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const loraPath = (arch) => runScript('tests/models/lora.sh', [arch]);

async function promptTokensTotal(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)?.[1] ?? NaN);
}

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: KV computed with a request's own adapter is neither reused nor saved as the base model's`, { timeout: 300000 }, async () => {
    const llama = await startLlama({ arch, slots: 1, ctx: 16384,
      extra: ['--lora', loraPath(arch), '--lora-init-without-apply'] });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: diskSettings });
    try {
      const doc = makeDocument(910, 4000);
      const adapted = await postJson(`${ws.url}/v1/chat/completions`,
        chat(doc, 'Q1?', { lora: [{ id: 0, scale: 0.25 }], max_tokens: 4 }));
      assert.equal(adapted.status, 200, JSON.stringify(adapted.body));
      const docTokens = adapted.body.timings.prompt_n - await questionTokens(llama.url, 'Q1?');
      // The same document without the adapter: llama-server alone would reuse the adapter's KV
      // (it clears a slot only for a task that names adapters), and warmslot's snapshot of the
      // document would be saved from it under the base model's key.
      const before = await promptTokensTotal(llama.url);
      const base = await askChat(ws, doc, 'Q2?');
      const computed = await promptTokensTotal(llama.url) - before;
      assert.match(base.disk, /^snapshot \d+ tokens$/, JSON.stringify(base));
      assert.ok(computed >= docTokens,
        `the base model computed the document itself (${computed} prompt tokens, document ${docTokens})`);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

// Supervised backends: the environment warmslot hands them is known.
const command = () => [llamaServerBin(), '-m', modelPath('llama'), '-c', '16384', '-np', '2', '-t', '2'];
const supervisedSettings = (cacheDir) =>
  `routing:\n  reconcile_interval: 100ms\ncache:\n  dir: ${cacheDir}\n  min_prefix_tokens: 1024\n`;

test('a KV-changing variable in a backend\'s env: or inherited environment makes new slot-file keys', { timeout: 400000 }, async () => {
  const cacheDir = tempDir('state');
  const doc = makeDocument(920, 5000);
  let n = 0;
  const run = async (lines, env) => {
    const ws = await startWarmslot({ backends: [{ name: 'sup', command: command(), lines }], extra: supervisedSettings(cacheDir), env });
    try {
      await waitFor('the supervised backend to be routed', async () => {
        const h = await getJson(`${ws.url}/health`);
        return h.body.backends?.[0]?.status === 'ok' && h.body.backends[0].routing;
      }, 120000, 100);
      return await askChat(ws, doc, `Question ${++n}?`);
    } finally {
      await ws.stop();
    }
  };
  const scale = (v) => ['env:', `  LLAMA_ARG_ROPE_FREQ_SCALE: "${v}"`];
  assert.match((await run(scale(1))).disk, /^snapshot \d+ tokens$/);
  assert.match((await run(scale(1))).disk, /^restored \d+ tokens$/, 'the same environment restores');
  const scaled = await run(scale(0.5));
  assert.doesNotMatch(scaled.disk, /restore/, 'a file of RoPE scale 1 is not loaded at scale 0.5');
  const inherited = await run([], { LLAMA_ARG_ROPE_FREQ_SCALE: '0.25' });
  assert.doesNotMatch(inherited.disk, /restore/, 'nor at a scale inherited from warmslot\'s environment');
  assert.match(inherited.disk, /^snapshot \d+ tokens$/);
});

test('a restore that fails for want of free KV cells (unified cache) keeps its good file', { timeout: 300000 }, async () => {
  // 4,096 cells shared by two slots: a document of ~1,000 tokens on disk cannot be restored
  // while the other slot holds ~3,400.
  let llama = await startLlama({ arch: 'llama', slots: 2, ctx: 2048, extra: ['-kvu', '--cache-ram', '0'] });
  const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 256\n';
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
  try {
    const small = makeDocument(930, 1000);
    assert.match((await askChat(ws, small, 'Q1?')).disk, /^snapshot \d+ tokens$/);
    llama = await restartLlama(llama);
    const big = makeDocument(931, 3300);
    assert.match((await askChat(ws, big, 'Q2?')).disk, /^snapshot \d+ tokens$/);
    const files = snapshotFiles(llama.saveDir);
    assert.equal(files.length, 2);
    const full = await postJson(`${ws.url}/v1/chat/completions`, chat(small, 'Q3?'));
    const disk = full.headers.get('x-warmslot-disk') ?? '';
    assert.match(disk, /^restore failed, file kept/, `${full.status} ${disk} ${JSON.stringify(full.body).slice(0, 300)}`);
    assert.deepEqual(snapshotFiles(llama.saveDir).sort(), files.sort(), 'both files are still on disk');
    // With the cache empty again the kept file restores.
    llama = await restartLlama(llama);
    const again = await askChat(ws, small, 'Q4?');
    assert.match(again.disk, /^restored \d+ tokens$/, JSON.stringify(again));
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

// One client connection (one warmslot worker, so the pooled backend connections it finds closed
// after a restart are that worker's) and the prompt tokens the backend computed for a request.
function client(ws) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const post = (route, body) => new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request(`${ws.url}${route}`, { method: 'POST', agent,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end(data);
  });
  return { post, close: () => agent.destroy() };
}

async function computedBy(llama, send) {
  const before = await promptTokensTotal(llama.url).catch(() => 0);
  const r = await send();
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  return { r, computed: await promptTokensTotal(llama.url) - (Number.isNaN(before) ? 0 : before) };
}

// No polling: only the requests' own signs of a restart make warmslot check the backend.
const unpolled = 'routing:\n  reconcile_interval: 1h\ncache:\n  min_prefix_tokens: 1024\n';
const messages = (system, q) => ({ model: 'tiny', max_tokens: 4, system, messages: [{ role: 'user', content: q }] });

test('a restart is noticed by a Messages request: its document is restored, not recomputed', { timeout: 300000 }, async () => {
  let llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: unpolled });
  const c = client(ws);
  try {
    const docA = makeDocument(940, 6000);
    const first = await c.post('/v1/messages', messages(docA, 'Q1?'));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.match(first.headers['x-warmslot-disk'] ?? '', /^snapshot \d+ tokens$/);
    llama = await restartLlama(llama);
    const bound = await questionTokens(llama.url, 'Q2?') + 64;
    const after = await computedBy(llama, () => c.post('/v1/messages', messages(docA, 'Q2?')));
    assert.match(after.r.headers['x-warmslot-disk'] ?? '', /^restored \d+ tokens$/, JSON.stringify(after.r.headers));
    assert.ok(after.computed <= bound, `Messages after a restart computed ${after.computed} (bound ${bound})`);
  } finally {
    c.close();
    await ws.stop();
    await llama.stop();
  }
});

test('a restart is noticed when the disk tier\'s calls met the closed connections first: known documents are restored', { timeout: 300000 }, async () => {
  let llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: unpolled });
  const c = client(ws);
  try {
    const docA = makeDocument(942, 6000);
    const first = await c.post('/v1/chat/completions', chat(docA, 'Q1?'));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.match(first.headers['x-warmslot-disk'] ?? '', /^snapshot \d+ tokens$/);
    llama = await restartLlama(llama);
    // A new document first: its snapshot's calls meet the closed connections and go on over
    // new ones (upstream::call), so the request itself finds a working connection.
    const b = await c.post('/v1/chat/completions', chat(makeDocument(943, 3000), 'QB?'));
    assert.equal(b.status, 200, JSON.stringify(b.body));
    assert.match(b.headers['x-warmslot-disk'] ?? '', /^snapshot \d+ tokens$/);
    const last = await computedBy(llama, () => c.post('/v1/chat/completions', chat(docA, 'Q3?')));
    assert.match(last.r.headers['x-warmslot-disk'] ?? '', /^restored \d+ tokens$/, JSON.stringify(last.r.headers));
    assert.ok(last.computed <= await questionTokens(llama.url, 'Q3?') + 64, `computed ${last.computed}`);
  } finally {
    c.close();
    await ws.stop();
    await llama.stop();
  }
});

test('a restart with the same identity forgets the slots even when a slot holds as many tokens again', { timeout: 300000 }, async () => {
  let llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  // No polling: warmslot sees the new process only through the next request's check.
  const settings = 'routing:\n  reconcile_interval: 1h\ncache:\n  min_prefix_tokens: 1024\n';
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
  const c = client(ws);
  try {
    const doc = makeDocument(950, 5000);
    const body = chat(doc, 'Q1?', { max_tokens: 1 });
    const first = await c.post('/v1/chat/completions', body);
    assert.equal(first.status, 200);
    assert.match(first.headers['x-warmslot-disk'] ?? '', /^snapshot \d+ tokens$/);
    const slot = Number(first.headers['x-warmslot-slot']);
    const held = first.body.timings.prompt_n + first.body.timings.cache_n;
    llama = await restartLlama(llama);
    // Another program fills that slot of the new process with as many tokens of other text.
    const text = (await postJson(`${llama.url}/apply-template`, body)).body.prompt;
    const other = text.replace(doc.slice(0, 40), 'x'.repeat(40));
    assert.notEqual(other, text);
    const direct = await postJson(`${llama.url}/completion`, { prompt: other, n_predict: 1, id_slot: slot, cache_prompt: true });
    assert.equal(direct.status, 200);
    const slots = (await getJson(`${llama.url}/slots`)).body;
    assert.equal(slots.find((s) => s.id === slot).n_prompt_tokens, held, 'the slot holds as many tokens as before');
    const q = 'Q2?';
    const after = await c.post('/v1/chat/completions', chat(doc, q));
    assert.equal(after.status, 200);
    assert.match(after.headers['x-warmslot-disk'] ?? '', /^restored \d+ tokens$/, JSON.stringify(after.headers));
    assert.ok(after.body.timings.prompt_n <= await questionTokens(llama.url, q) + 64, JSON.stringify(after.body.timings));
  } finally {
    c.close();
    await ws.stop();
    await llama.stop();
  }
});

test('the same model file copied to another path with another time has the same identity: its slot files restore', { timeout: 300000 }, async () => {
  const dir = tempDir('model');
  const first = path.join(dir, 'model.gguf');
  fs.copyFileSync(modelPath('llama'), first);
  let llama = await startLlama({ model: first, slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: diskSettings });
  try {
    const doc = makeDocument(960, 6000);
    assert.match((await askChat(ws, doc, 'Q1?')).disk, /^snapshot \d+ tokens$/);
    await llama.stop();
    // As on another host: another directory, another name, another modification time.
    fs.mkdirSync(path.join(dir, 'elsewhere'));
    const copy = path.join(dir, 'elsewhere', 'renamed.gguf');
    fs.copyFileSync(first, copy);
    const old = new Date(Date.now() - 86400 * 1000);
    fs.utimesSync(copy, old, old);
    llama = await startLlama({ model: copy, slots: 2, ctx: 16384, slotSaveDir: llama.saveDir, port: llama.port });
    const q = 'Q2?';
    const after = await askChat(ws, doc, q);
    assert.match(after.disk, /^restored \d+ tokens$/, JSON.stringify(after));
    assert.ok(after.processed <= await questionTokens(llama.url, q) + 64, JSON.stringify(after));
  } finally {
    await ws.stop();
    await llama.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
