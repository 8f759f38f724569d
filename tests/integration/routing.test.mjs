// Cache-aware routing against real llama-server processes, on the plain and the hybrid model.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { readSse, startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const fastReconcile = 'routing:\n  reconcile_interval: 100ms\n';
const docs = [1, 2, 3].map((seed) => makeDocument(100 + seed, 6500));

async function ask(ws, system, question, extra = {}) {
  const r = await postJson(`${ws.url}/v1/chat/completions`, chat(system, question, extra));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return {
    route: r.headers.get('x-warmslot-route'),
    slot: r.headers.get('x-warmslot-slot'),
    backend: r.headers.get('x-warmslot-backend'),
    cached: Number(r.headers.get('x-warmslot-cached-tokens')),
    processed: Number(r.headers.get('x-warmslot-processed-tokens')),
    timings: r.body.timings,
  };
}

async function routingReady(ws, count = 1) {
  await waitFor('backends to be routed', async () => {
    const h = await getJson(`${ws.url}/health`);
    return h.body.backends?.filter((b) => b.routing).length >= count;
  }, 30000);
}

async function metric(ws, name) {
  const text = await (await fetch(`${ws.url}/metrics`)).text();
  return text.split('\n').filter((l) => l.startsWith(name)).map((l) => Number(l.split(' ').at(-1)))
    .reduce((a, b) => a + b, 0);
}

// The question-only bound for a hit: plain models reuse up to the question; hybrid ones roll
// back to the checkpoint at the last user turn or about 512 tokens before the end.
const hitBound = (arch) => (arch === 'qwen35' ? 600 : 80);

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: each document stays on its slot; one-offs go to the scratch slot`, { timeout: 300000 }, async () => {
    const llama = await startLlama({ arch, slots: 3, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra: fastReconcile });
    try {
      await routingReady(ws);
      const a1 = await ask(ws, docs[0], 'First question about A?');
      const b1 = await ask(ws, docs[1], 'First question about B?');
      assert.match(a1.route, /^miss; reason=new_prefix/);
      assert.match(b1.route, /^miss; reason=new_prefix/);
      assert.notEqual(a1.slot, b1.slot, 'two documents, two slots');
      assert.notEqual(a1.slot, '2', 'documents stay off the scratch slot');

      for (let i = 0; i < 3; i++) {
        const oneOff = await postJson(`${ws.url}/v1/chat/completions`,
          chat('You are terse.', `Unrelated short chat number ${i}.`));
        assert.equal(oneOff.headers.get('x-warmslot-route'), 'scratch');
        assert.equal(oneOff.headers.get('x-warmslot-slot'), '2');
      }
      const a2 = await ask(ws, docs[0], 'Second question about A?');
      const b2 = await ask(ws, docs[1], 'Second question about B?');
      for (const [first, again] of [[a1, a2], [b1, b2]]) {
        assert.equal(again.route, 'hit');
        assert.equal(again.slot, first.slot);
        assert.ok(again.processed <= hitBound(arch), `processed ${again.processed}`);
        assert.equal(again.processed, again.timings.prompt_n, 'headers carry the timings');
      }
      assert.ok(await metric(ws, 'warmslot_prompt_tokens_reused_total') >= 2 * 5000);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

test('a third document evicts the cheapest prefix, and the route says why', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 3, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra: fastReconcile });
  try {
    await routingReady(ws);
    await ask(ws, docs[0], 'A?');
    await ask(ws, docs[0], 'A again?');       // A is used twice: more valuable
    await ask(ws, docs[1], 'B?');
    const c = await ask(ws, docs[2], 'C?');   // evicts B, the cheaper one
    const a = await ask(ws, docs[0], 'A once more?');
    assert.equal(a.route, 'hit');
    const b = await ask(ws, docs[1], 'B again?');
    assert.equal(b.route, 'miss; reason=evicted');
    assert.equal(b.slot, c.slot, 'B comes back where C was, the cheaper prefix');
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('a request for a busy slot never pins it: it waits for it or takes another slot', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 3, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra: fastReconcile });
  try {
    await routingReady(ws);
    const first = await ask(ws, docs[0], 'Warm up A.');
    const res = await fetch(`${ws.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat(docs[0], 'Answer about A.', { stream: true, max_tokens: 40 })),
    });
    // The stream's headers arrive when its task has started: the slot is busy from here on.
    assert.equal(res.headers.get('x-warmslot-slot'), first.slot);
    let events = 0;
    const streaming = readSse(res, () => { events += 1; });
    const second = await ask(ws, docs[0], 'Short question about A while it is busy.');
    await streaming;
    assert.ok(events > 1, 'the busy request completed');
    // Which of the two the planner chooses depends on the prefill saved against the expected
    // wait (unit-tested in planner_test); here the invariant: never pinned while busy.
    if (second.slot === first.slot) {
      // A plain "hit" only if the stream had ended in warmslot before the second was planned.
      assert.match(second.route, /^hit(; waited_ms=\d+)?$/);
      assert.ok(second.processed <= hitBound('llama'));
    } else {
      assert.equal(second.route, 'miss; reason=slot_busy');
    }
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('outside traffic and a backend restart correct what warmslot believes', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra: fastReconcile });
  try {
    await routingReady(ws);
    const a = await ask(ws, docs[0], 'A?');
    // Someone uses the same slot directly, behind warmslot's back.
    await postJson(`${llama.url}/v1/chat/completions`, { id_slot: Number(a.slot), ...chat(docs[1], 'Direct.') });
    await waitFor('the belief to be corrected', async () =>
      (await metric(ws, 'warmslot_belief_corrections_total')) >= 1, 5000);
    const again = await ask(ws, docs[0], 'A again?');
    assert.notEqual(again.route, 'hit', 'no hit is claimed for a prefix that is gone');
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('streamed responses carry what the cache did as trailers', { timeout: 120000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra: fastReconcile });
  try {
    await routingReady(ws);
    const body = JSON.stringify(chat('System prompt.', 'Stream please.', { stream: true }));
    const { headers, trailers, text } = await new Promise((resolve, reject) => {
      const req = http.request(`${ws.url}/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' },
      }, (res) => {
        let data = '';
        res.on('data', (c) => { data += c; });
        res.on('end', () => resolve({ headers: res.headers, trailers: res.trailers, text: data }));
      });
      req.on('error', reject);
      req.end(body);
    });
    assert.ok(headers['x-warmslot-route']);
    assert.match(text, /data: \[DONE\]/);
    assert.ok(Number(trailers['x-warmslot-processed-tokens']) > 0);
    assert.ok(Number.isInteger(Number(trailers['x-warmslot-cached-tokens'])));
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('replicas: each document sticks to one backend process', { timeout: 300000 }, async () => {
  const r1 = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const r2 = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'r1', url: r1.url }, { name: 'r2', url: r2.url }],
    extra: fastReconcile });
  try {
    await routingReady(ws, 2);
    const a = await ask(ws, docs[0], 'A?');
    const b = await ask(ws, docs[1], 'B?');
    assert.notEqual(a.backend, b.backend, 'two documents spread over two replicas');
    for (let i = 0; i < 2; i++) {
      const a2 = await ask(ws, docs[0], `A ${i}?`);
      const b2 = await ask(ws, docs[1], `B ${i}?`);
      assert.deepEqual([a2.backend, a2.route], [a.backend, 'hit']);
      assert.deepEqual([b2.backend, b2.route], [b.backend, 'hit']);
    }
  } finally {
    await ws.stop();
    await r1.stop();
    await r2.stop();
  }
});

test('different models: chosen by the request\'s model; unknown model is a 404', { timeout: 300000 }, async () => {
  const plain = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  const hybrid = await startLlama({ arch: 'qwen35', slots: 2, ctx: 8192 });
  const extra = `${fastReconcile}`;
  const ws = await startWarmslot({
    backends: [{ name: 'plain', url: plain.url }, { name: 'hybrid', url: hybrid.url }], extra,
  });
  try {
    await routingReady(ws, 2);
    const models = (await getJson(`${ws.url}/v1/models`)).body.data.map((m) => m.id);
    assert.ok(models.some((m) => m.includes('llama-tiny')) && models.some((m) => m.includes('qwen35-tiny')),
      JSON.stringify(models));
    const toHybrid = await postJson(`${ws.url}/v1/chat/completions`,
      chat('S', 'Q', { model: models.find((m) => m.includes('qwen35-tiny')) }));
    assert.equal(toHybrid.headers.get('x-warmslot-backend'), 'hybrid');
    const toPlain = await postJson(`${ws.url}/v1/chat/completions`,
      chat('S', 'Q', { model: models.find((m) => m.includes('llama-tiny')) }));
    assert.equal(toPlain.headers.get('x-warmslot-backend'), 'plain');
    const unknown = await postJson(`${ws.url}/v1/chat/completions`, chat('S', 'Q', { model: 'no-such-model' }));
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error.type, 'not_found_error');
  } finally {
    await ws.stop();
    await plain.stop();
    await hybrid.stop();
  }
});

test('a backend with llama-server\'s default slot flags is passed through, never pinned', { timeout: 300000 }, async () => {
  // No -np: 4 slots with a unified KV cache whose idle slots move into the RAM cache.
  const llama = await startLlama({ arch: 'llama', slots: 0 });
  const ws = await startWarmslot({ backends: [{ name: 'd', url: llama.url }], extra: fastReconcile });
  try {
    await waitFor('the probe to finish', async () =>
      (await getJson(`${ws.url}/health`)).body.backends?.[0]?.slots > 0, 30000);
    const h = await getJson(`${ws.url}/health`);
    assert.equal(h.body.backends[0].routing, false);
    const first = await ask(ws, docs[0], 'A?');
    const again = await ask(ws, docs[0], 'A again?');
    assert.equal(first.route, 'pass_through');
    assert.equal(first.slot, '-');
    assert.ok(again.processed <= hitBound('llama'), 'the server\'s own cache still works');
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
