// The shared tier (cache.shared_dir): two "hosts", each a llama-server with its own slot
// directory and a warmslot of its own, see one shared directory. Documents computed on host 1 are
// published there; host 1 is lost (both its processes stopped); the same questions on host 2
// compute at most the question plus 64 tokens each, on the plain and the hybrid model. Host 2's
// model is a copy of the file at another path with another time, as on another machine. With the
// shared tier off, host 2 computes every document again. A FIFO planted where a manifest should
// be (opening it for reading would block) is a miss at once: files there are read only when the
// open descriptor is a regular file (cache/safe_file.hpp).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { postJson, questionTokens, snapshotFiles, startLlama } from './lib/llama.mjs';
import { tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { diskSettings } from './lib/ask.mjs';
import { answerTokens, assertSameAnswer, freshAnswer } from './lib/answers.mjs';
import { chat, makeDocument } from './lib/text.mjs';

async function promptTokensTotal(llama) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)[1]);
}

// warmslot_shared_files_total as { "op/result": n }, the non-zero ones.
async function sharedFiles(ws, headers = {}) {
  const text = await (await fetch(`${ws.url}/metrics`, { headers })).text();
  return Object.fromEntries([...text.matchAll(/^warmslot_shared_files_total\{op="(\w+)",result="(\w+)"\} (\d+)$/mg)]
    .filter((m) => m[3] !== '0').map((m) => [`${m[1]}/${m[2]}`, Number(m[3])]));
}

// Answers of answerTokens tokens: long enough to tell whose state a slot held.
const body = (doc, q) => chat(doc, q, { max_tokens: answerTokens });

async function ask(ws, doc, q) {
  const r = await postJson(`${ws.url}/v1/chat/completions`, body(doc, q));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { disk: r.headers.get('x-warmslot-disk') ?? '', processed: Number(r.headers.get('x-warmslot-processed-tokens')),
    route: r.headers.get('x-warmslot-route') ?? '', text: r.body.choices[0].message.content, cached: r.body.timings.cache_n };
}

// A host: a llama-server of `model` and a warmslot in front of it, with the shared tier at
// `shared` (none when null). `headers`: what /health needs to show the backends (a key).
async function startHost(arch, model, shared, extra = '', headers = {}) {
  const llama = await startLlama({ arch, model, slots: 2, ctx: 16384 });
  const sharedLine = shared ? `  shared_dir: ${shared}\n` : '';
  const ws = await startWarmslot({ backends: [{ name: 'gpu0', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: `${diskSettings}${sharedLine}${extra}` });
  await waitFor('the backend to be routed', async () =>
    (await (await fetch(`${ws.url}/health`, { headers })).json()).backends?.some((b) => b.routing), 30000);
  return { llama, ws, stop: async () => { await ws.stop(); await llama.stop(); } };
}

// The model file copied to a new path and given another modification time.
function copiedModel(file) {
  const copy = path.join(tempDir('model-copy'), `copy-${path.basename(file)}`);
  fs.copyFileSync(file, copy);
  const t = new Date(Date.now() - 86400000);
  fs.utimesSync(copy, t, t);
  return copy;
}

const questions = ['What is on the first line?', 'And what is on the last line?'];

// Two documents computed on host 1 (and published when `shared`), host 1 stopped, then asked on
// host 2: what host 2's llama-server computed for each.
async function hostLoss(arch, shared) {
  const docs = [makeDocument(950, 4000), makeDocument(951, 4000)];
  const h1 = await startHost(arch, undefined, shared);
  try {
    for (const doc of docs) assert.match((await ask(h1.ws, doc, questions[0])).disk, /^snapshot \d+ tokens$/);
    if (shared) {
      await waitFor('both files published', async () => (await sharedFiles(h1.ws))['publish/published'] === 2, 30000);
      const names = fs.readdirSync(shared).sort();
      assert.deepEqual(names, snapshotFiles(h1.llama.saveDir).flatMap((f) => [f, f.replace(/\.bin$/, '.json')]).sort());
    }
  } finally {
    await h1.stop();  // host 1 is lost: its slot files with it
  }
  fs.rmSync(h1.llama.saveDir, { recursive: true, force: true });
  const h2 = await startHost(arch, copiedModel(h1.llama.model), shared);
  try {
    const out = [];
    for (const doc of docs) {
      const before = await promptTokensTotal(h2.llama);
      const r = await ask(h2.ws, doc, questions[1]);
      const computed = (await promptTokensTotal(h2.llama)) - before;
      out.push({ ...r, computed, bound: (await questionTokens(h2.llama.url, questions[1])) + 64 });
    }
    const counted = await sharedFiles(h2.ws);
    // What a llama-server like host 2's answers from scratch, for each document.
    for (const [i, doc] of docs.entries()) out[i].want = await freshAnswer(h2.llama, body(doc, questions[1]));
    return { results: out, counted };
  } finally {
    await h2.stop();
  }
}

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: host 1's documents are restored on host 2 from the shared tier after host 1 is lost`, { timeout: 400000 }, async () => {
    const shared = tempDir('shared');
    const { results, counted } = await hostLoss(arch, shared);
    for (const r of results) {
      assert.match(r.disk, /^restored \d+ tokens \(from the shared tier, copied\)$/);
      assert.ok(r.computed <= r.bound, `host 2 computed ${r.computed} prompt tokens, bound ${r.bound}`);
      assert.equal(r.processed, r.computed, 'what warmslot reports is what llama-server computed');
      assertSameAnswer(r, r.want, 'restored from the shared tier');
    }
    assert.deepEqual(counted, { 'fetch/copied': 2 });
    // Each fetch was recorded in its manifest.
    for (const f of fs.readdirSync(shared).filter((n) => n.endsWith('.json'))) {
      assert.equal(JSON.parse(fs.readFileSync(path.join(shared, f), 'utf8')).hits, 1, f);
    }
  });
}

test('llama: without the shared tier, host 2 computes every document again', { timeout: 400000 }, async () => {
  const { results, counted } = await hostLoss('llama', null);
  for (const r of results) {
    assert.match(r.disk, /^snapshot \d+ tokens$/);
    assert.ok(r.computed >= 3000, `the document was computed (${r.computed})`);
  }
  assert.deepEqual(counted, {});
});

test('llama: a FIFO planted where a manifest should be is a miss at once, never a stalled thread; the tier goes on', { timeout: 300000 }, async () => {
  const shared = tempDir('shared-fifo');
  // Long enough that a lookup stuck on the FIFO would show as overrun ("unavailable").
  const slow = '  shared_timeout: 20s\n';
  const h1 = await startHost('llama', undefined, shared, slow);
  let h2;
  try {
    const doc = makeDocument(960, 4000);
    assert.match((await ask(h1.ws, doc, questions[0])).disk, /^snapshot \d+ tokens$/);
    await waitFor('the file published', async () => (await sharedFiles(h1.ws))['publish/published'] === 1, 30000);
    // Its manifest replaced by a FIFO, as another user of the directory could: opening it for
    // reading would block until a writer comes. Nothing ever writes to it.
    const [manifest] = fs.readdirSync(shared).filter((n) => n.endsWith('.json'));
    fs.rmSync(path.join(shared, manifest));
    execFileSync('mkfifo', [path.join(shared, manifest)]);
    h2 = await startHost('llama', undefined, shared, slow);
    const r = await ask(h2.ws, doc, questions[1]);
    assert.ok(r.processed >= 3000, `a miss: the document was computed (${r.processed})`);
    assert.match(r.disk, /^snapshot \d+ tokens$/);
    const other = await ask(h2.ws, makeDocument(961, 4000), questions[1]);
    assert.ok(other.processed >= 3000);
    // Both lookups were plain misses and both saves were published: no call overran.
    await waitFor('both publishes', async () => (await sharedFiles(h2.ws))['publish/published'] === 2, 30000);
    const counted = await sharedFiles(h2.ws);
    assert.deepEqual(counted, { 'fetch/missing': 2, 'publish/published': 2 }, JSON.stringify(counted));
  } finally {
    await h2?.stop();
    await h1.stop();
  }
});

// Host 1 has a document of tenant a and one of tenant b published; host 2 (host 1 lost) is
// asked both by tenant b.
async function tenantsOnTwoHosts(shareLine) {
  const shared = tempDir('shared-tenants');
  const keys = { a: 'shared-tenant-a-0001', b: 'shared-tenant-b-0001', admin: 'shared-admin-key-0001' };
  const extra = `${shareLine}api_keys:\n  - ${keys.admin}\n  - {key: ${keys.a}, role: client, tenant: a}\n  - {key: ${keys.b}, role: client, tenant: b}\n`;
  const askAs = async (ws, tenant, doc, q) => {
    const r = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, q), { authorization: `Bearer ${keys[tenant]}` });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return { disk: r.headers.get('x-warmslot-disk') ?? '', processed: Number(r.headers.get('x-warmslot-processed-tokens')) };
  };
  const docs = { a: makeDocument(970, 4000), b: makeDocument(971, 4000) };
  const admin = { authorization: `Bearer ${keys.admin}` };
  const h1 = await startHost('llama', undefined, shared, extra, admin);
  try {
    for (const t of ['a', 'b']) assert.match((await askAs(h1.ws, t, docs[t], questions[0])).disk, /^snapshot \d+ tokens$/);
    await waitFor('both files published', async () =>
      (await sharedFiles(h1.ws, admin))['publish/published'] === 2, 30000);
    const tenants = fs.readdirSync(shared).filter((n) => n.endsWith('.json'))
      .map((f) => JSON.parse(fs.readFileSync(path.join(shared, f), 'utf8')).tenant).sort();
    assert.deepEqual(tenants, ['a', 'b'], 'each manifest names the tenant whose request published it');
  } finally {
    await h1.stop();
  }
  fs.rmSync(h1.llama.saveDir, { recursive: true, force: true });
  const h2 = await startHost('llama', undefined, shared, extra, admin);
  try {
    return { ofA: await askAs(h2.ws, 'b', docs.a, questions[1]), ofB: await askAs(h2.ws, 'b', docs.b, questions[1]) };
  } finally {
    await h2.stop();
  }
}

test('llama: a file tenant a published to the shared tier is not restored for tenant b; b\'s own is', { timeout: 400000 }, async () => {
  const { ofA, ofB } = await tenantsOnTwoHosts('');
  assert.match(ofA.disk, /^snapshot \d+ tokens$/, 'a\'s document was computed for b');
  assert.ok(ofA.processed >= 3000, `computed ${ofA.processed}`);
  assert.match(ofB.disk, /^restored \d+ tokens \(from the shared tier, copied\)$/);
});

test('llama: with cache.shared_across_tenants, tenant b restores the file tenant a published', { timeout: 400000 }, async () => {
  const { ofA, ofB } = await tenantsOnTwoHosts('  shared_across_tenants: true\n');
  assert.match(ofA.disk, /^restored \d+ tokens \(from the shared tier, copied\)$/);
  assert.ok(ofA.processed < 1000, `computed ${ofA.processed}`);
  assert.match(ofB.disk, /^restored \d+ tokens \(from the shared tier, copied\)$/);
});
