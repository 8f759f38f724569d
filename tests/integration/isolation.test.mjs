// Strict tenant isolation (cache.isolation: tenant): a tenant's request reuses nothing another
// tenant's request left in a slot or on disk, its reports tell nothing of other tenants' prompts,
// and what another tenant's request takes over is kept on disk for its owner. Side by side with
// the shared default on the same traffic. Real llama-server processes on the tiny plain model,
// run as isolation asks (--cache-ram 0).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { readSse, startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const keys = { a: 'isolation-client-a-0001', b: 'isolation-client-b-0001', admin: 'isolation-admin-0001' };
const bearer = (k) => ({ authorization: `Bearer ${k}` });
const keyLines = `api_keys:
  - ${keys.admin}
  - {key: ${keys.a}, role: client, tenant: a}
  - {key: ${keys.b}, role: client, tenant: b}
`;
const settings = (mode) => `routing:\n  reconcile_interval: 100ms\n` +
  `cache:\n  min_prefix_tokens: 1024\n  isolation: ${mode}\n${keyLines}`;

async function promptTokensTotal(llama) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)?.[1] ?? NaN);
}

// One Chat Completions request: what the client is told was reused, and what llama-server
// computed for it (its /metrics: warmslot's own priming included).
async function ask(ws, llama, key, doc, question, extra = {}) {
  const before = await promptTokensTotal(llama);
  const r = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, question, extra), bearer(key));
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  return {
    cached: r.body.timings.cache_n,
    header: Number(r.headers.get('x-warmslot-cached-tokens') ?? 0),
    usage: r.body.usage.prompt_tokens_details?.cached_tokens ?? 0,
    prompt: r.body.usage.prompt_tokens,
    computed: (await promptTokensTotal(llama)) - before,
    route: r.headers.get('x-warmslot-route'),
    disk: r.headers.get('x-warmslot-disk') ?? '',
  };
}

async function askMessages(ws, llama, key, doc, question) {
  const before = await promptTokensTotal(llama);
  const r = await postJson(`${ws.url}/v1/messages`, {
    model: 'tiny', max_tokens: 4, temperature: 0,
    system: [{ type: 'text', text: doc }], messages: [{ role: 'user', content: question }],
  }, { ...bearer(key), 'anthropic-version': '2023-06-01' });
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  return { prompt: r.body.usage.input_tokens + (r.body.usage.cache_read_input_tokens ?? 0),
    computed: (await promptTokensTotal(llama)) - before, route: r.headers.get('x-warmslot-route'),
    disk: r.headers.get('x-warmslot-disk') ?? '' };
}

function rows(dir) {
  return execFileSync('sqlite3', ['-separator', '|', path.join(dir, 'warmslot-index.sqlite'),
    'SELECT key, tenant, tokens FROM snapshots ORDER BY rowid;'], { encoding: 'utf8' })
    .split('\n').filter(Boolean).map((l) => { const [key, tenant, tokens] = l.split('|'); return { key, tenant, tokens: Number(tokens) }; });
}

// One slot: every request of the other tenant lands where the last one ran.
async function setup(mode) {
  const llama = await startLlama({ slots: 1, ctx: 16384, extra: ['--cache-ram', '0'] });
  let ws;
  try {
    ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings(mode) });
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`, { headers: bearer(keys.admin) })).body.backends?.[0]?.routing, 30000);
  } catch (e) {
    await ws?.stop();
    await llama.stop();
    throw e;
  }
  return { llama, ws, stop: async () => { await ws.stop(); await llama.stop(); } };
}

test('isolation: one tenant\'s request reuses nothing another\'s left, its reports say so, and the owner gets its prefix back from disk', { timeout: 400000 }, async () => {
  const doc = makeDocument(4401, 6000);
  const measured = {};
  for (const mode of ['shared', 'tenant']) {
    const s = await setup(mode);
    try {
      const a1 = await ask(s.ws, s.llama, keys.a, doc, 'What comes first?');
      assert.ok(a1.prompt > 1000, JSON.stringify(a1));
      const a2 = await ask(s.ws, s.llama, keys.a, doc, 'What comes last?');
      assert.ok(a2.cached > 1000, `a's own second question reuses its document (${mode}): ${JSON.stringify(a2)}`);
      // What b's explain and b's request with the same document learn.
      const explained = await postJson(`${s.ws.url}/warmslot/explain`, chat(doc, 'Which line is longest?'), bearer(keys.b));
      assert.equal(explained.status, 200);
      const b1 = await ask(s.ws, s.llama, keys.b, doc, 'Which line is longest?');
      const b2 = await ask(s.ws, s.llama, keys.b, doc, 'Which line is shortest?');
      const a3 = await ask(s.ws, s.llama, keys.a, doc, 'How many lines are there?');
      // A document nobody sent before, as b sees it: what b1 must look like under isolation.
      const control = await ask(s.ws, s.llama, keys.b, makeDocument(4403, 6000), 'Which line is longest?');
      // Messages (llama-server places such a request itself): a's chat leaves a new document
      // in the slot, b asks about it over Messages.
      const other = makeDocument(4404, 6000);
      await ask(s.ws, s.llama, keys.a, other, 'What comes first?');
      const m1 = await askMessages(s.ws, s.llama, keys.b, other, 'Name one word.');
      measured[mode] = { a1, a2, b1, b2, a3, control, m1, explain: explained.body.plan, files: rows(s.llama.saveDir) };
    } finally {
      await s.stop();
    }
  }
  const { shared, tenant } = measured;
  // Shared (the default): b's request reuses what a's left, and is told so.
  assert.ok(shared.b1.cached > 1000, JSON.stringify(shared.b1));
  assert.ok(shared.b1.header > 1000);
  assert.ok(shared.m1.computed < shared.m1.prompt / 2, JSON.stringify(shared.m1));
  // Isolated: b's request computes its whole prompt (priming its own copy of the document, then
  // the question), and is told what it would be told of a document nobody ever sent.
  assert.equal(tenant.explain.route, 'miss_new_prefix', JSON.stringify(tenant.explain));
  assert.equal(tenant.explain.expected_cached_tokens, 0);
  assert.ok(tenant.b1.computed >= tenant.b1.prompt, `b's first request computed its whole prompt: ${JSON.stringify(tenant.b1)}`);
  assert.equal(tenant.b1.route, tenant.control.route, JSON.stringify([tenant.b1, tenant.control]));
  assert.equal(tenant.b1.route, 'miss; reason=new_prefix');
  assert.match(tenant.b1.disk, /^snapshot \d+ tokens$/);
  assert.match(tenant.control.disk, /^snapshot \d+ tokens$/);
  // b's own second question reuses b's own copy.
  assert.ok(tenant.b2.cached > 1000, JSON.stringify(tenant.b2));
  assert.ok(tenant.b2.computed < tenant.b2.prompt / 2, JSON.stringify(tenant.b2));
  // a's slot was taken by b: a's prefix comes back from a's own file, not recomputed.
  assert.match(tenant.a3.disk, /^restored \d+ tokens/, JSON.stringify(tenant.a3));
  assert.ok(tenant.a3.computed < tenant.a3.prompt / 2, JSON.stringify(tenant.a3));
  // Messages: nothing of a's reused either.
  assert.ok(tenant.m1.computed >= tenant.m1.prompt, JSON.stringify(tenant.m1));
  // Two files of the same prefix, one per tenant, under different keys.
  const ofDoc = tenant.files.filter((f) => f.tokens === tenant.files[0].tokens);
  const byTenant = new Map(ofDoc.map((f) => [f.tenant, f]));
  assert.ok(byTenant.has('a') && byTenant.has('b'), JSON.stringify(tenant.files));
  assert.notEqual(byTenant.get('a').key, byTenant.get('b').key);
  // What isolation costs here: b's first request computes the document again.
  const cost = tenant.b1.computed - shared.b1.computed;
  assert.ok(cost > 1000, `isolation costs b's prefill of the document: ${cost} tokens`);
  console.log(`# isolation cost for b's first request: ${shared.b1.computed} tokens shared, ${tenant.b1.computed} isolated`);
});

test('isolation: a request that finds every slot busy waits for one instead of joining llama-server\'s queue', { timeout: 400000 }, async () => {
  const s = await setup('tenant');
  try {
    const doc = makeDocument(4402, 6000);
    await ask(s.ws, s.llama, keys.a, doc, 'What comes first?');
    // a's long answer holds the one slot; b's request with the same document comes once a's
    // first token streamed (3,000 tokens: about 2 s on the tiny model).
    const long = await fetch(`${s.ws.url}/v1/chat/completions`, {
      method: 'POST', headers: { ...bearer(keys.a), 'content-type': 'application/json' },
      body: JSON.stringify(chat(doc, 'Count.', { max_tokens: 3000, ignore_eos: true, stream: true })),
    });
    assert.equal(long.status, 200);
    let running;
    const started = new Promise((resolve) => { running = resolve; });
    let cached = 0;
    const finished = readSse(long, (data) => {
      running();
      if (data === '[DONE]') return;
      const event = JSON.parse(data);
      if (event.timings) cached = event.timings.cache_n;
    });
    await started;
    const b = await ask(s.ws, s.llama, keys.b, doc, 'Which line is longest?');
    await finished;
    assert.ok(cached > 1000, `a's long answer reused its document: ${cached}`);
    // Queued in llama-server, b's request would have been given a's slot and reused its
    // document; here it waited and computed its own.
    assert.ok(b.computed >= b.prompt, JSON.stringify(b));
    assert.match(b.disk, /^snapshot \d+ tokens$/, JSON.stringify(b));
  } finally {
    await s.stop();
  }
});
