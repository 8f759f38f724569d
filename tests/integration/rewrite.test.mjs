// Append-only rewriting against a real llama-server with the hybrid model (Gated DeltaNet +
// attention), which cannot roll back into the middle of a prompt: an edit in a document, a
// clock in the system prompt or documents in a new order would cost the whole prompt again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { freePort, waitFor } from './lib/procs.mjs';
import { readSse, startWarmslot } from './lib/warmslot.mjs';
import { makeDocument } from './lib/text.mjs';

const base = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';

async function setup(rewrite) {
  const llama = await startLlama({ arch: 'qwen35', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({
    backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: base + rewrite,
  });
  await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
  return { llama, ws, stop: async () => { await ws.stop(); await llama.stop(); } };
}

const body = (messages) => ({ messages, max_tokens: 4, temperature: 0, seed: 42 });

// Every prompt token the server computed, priming by the disk tier included.
async function serverPromptTokens(llama) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)[1]);
}

async function send(setupResult, messages) {
  const before = await serverPromptTokens(setupResult.llama);
  const r = await postJson(`${setupResult.ws.url}/v1/chat/completions`, body(messages));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const t = r.body.timings;
  return {
    rewrites: r.headers.get('x-warmslot-rewrites'),
    processed: t.prompt_n, cached: t.cache_n, total: t.prompt_n + t.cache_n,
    work: (await serverPromptTokens(setupResult.llama)) - before,
    reply: r.body.choices[0].message.content,
  };
}

async function tokens(llama, text) {
  const r = await postJson(`${llama.url}/tokenize`, { content: text, parse_special: true });
  return r.body.tokens.length;
}

function replaceMiddleLine(doc, line) {
  const start = doc.indexOf('\n', Math.floor(doc.length / 2)) + 1;
  const end = doc.indexOf('\n', start);
  return doc.slice(0, start) + line + doc.slice(end);
}

test('edits: append sends the cached document and a revision note instead of the whole document again', { timeout: 300000 }, async (t) => {
  const s = await setup('rewrite:\n  default:\n    documents:\n      min_bytes: 2KiB\n      edits: append\n');
  try {
    const doc = makeDocument(601, 6600);
    const first = await send(s, [{ role: 'system', content: doc }, { role: 'user', content: 'Summarise the document.' }]);
    assert.ok(first.total >= 6000, `document of ${first.total} tokens`);
    assert.equal(first.rewrites, 'none');

    const edited = replaceMiddleLine(doc, '601.999 the harbour lantern was moved to the quarry.');
    const messages = [{ role: 'system', content: edited }, { role: 'user', content: 'What changed?' }];
    const explained = await postJson(`${s.ws.url}/warmslot/explain`, body(messages));
    assert.equal(explained.status, 200);
    assert.deepEqual(explained.body.rewrites, ['edits_append=1']);
    const sent = explained.body.request.messages;
    assert.equal(sent[0].content, doc, 'the cached original is sent unchanged');
    assert.match(sent[1].content, /^<revision>\nIn the document that begins "601\.1 [^\n]*":\nLine \d+ now reads:\n601\.999 the harbour lantern/);
    assert.match(sent[1].content, /What changed\?$/);
    assert.equal(explained.body.plan.route, 'hit');

    const second = await send(s, messages);
    assert.equal(second.rewrites, 'edits_append=1');
    const bound = (await tokens(s.llama, `<|im_start|>user\n${sent[1].content}<|im_end|>\n<|im_start|>assistant\n`)) + 64;
    t.diagnostic(`document ${first.total} tokens; after the edit processed ${second.processed} (bound ${bound})`);
    assert.ok(second.processed <= bound, `processed ${second.processed}, bound ${bound} (document ${first.total})`);
    assert.ok(second.work <= bound, `server computed ${second.work}, bound ${bound}`);
    const log = fs.readFileSync(s.ws.logFile, 'utf8');
    assert.match(log, /rewrites="edits_append=1"/);
  } finally {
    await s.stop();
  }
});

test('a clock in the system prompt: at least 90% of the prompt is reused on every turn', { timeout: 300000 }, async (t) => {
  const s = await setup('rewrite:\n  default:\n    volatile_lines:\n      presets: [date, time]\n');
  try {
    // The hybrid model rolls back to a checkpoint up to about 516 tokens before a divergence:
    // with a prompt of 8,000 tokens that is under 10% of it.
    const manual = makeDocument(602, 8000);
    let clock = Date.UTC(2026, 10, 29, 23, 59, 50);
    const system = () => {
      const d = new Date((clock += 7000));
      return `You are the support assistant of the harbour.\nCurrent date: ${d.toISOString().slice(0, 10)}\n` +
        `Current time: ${d.toISOString().slice(11, 19)} UTC\nAnswer from the manual below.\n\n${manual}`;
    };
    const conversation = async (questions) => {
      const history = [];
      const results = [];
      for (const q of questions) {
        history.push({ role: 'user', content: q });
        const r = await send(s, [{ role: 'system', content: system() }, ...history]);
        history.push({ role: 'assistant', content: r.reply });
        results.push(r);
      }
      return results;
    };
    const one = await conversation(['Where is the lantern?', 'And the ledger?']);
    const two = await conversation(['Who keeps the compass?', 'Since when?', 'Thank you, and the violin?']);
    // The date changes at midnight between turns: both lines move, every time.
    for (const r of [...one, ...two]) assert.equal(r.rewrites.split(', ')[0], 'volatile_lines=2');
    for (const [i, r] of [...one, ...two].entries()) {
      t.diagnostic(`turn ${i}: reused ${r.cached} of ${r.total}`);
      if (i === 0) continue;  // the very first request reads everything
      assert.ok(r.cached >= 0.9 * r.total, `turn ${i}: reused ${r.cached} of ${r.total}`);
      assert.ok(r.work <= 0.1 * r.total, `turn ${i}: server computed ${r.work} of ${r.total}`);
    }
    // A streamed answer names its rewrites in the response headers too.
    const res = await fetch(`${s.ws.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...body([{ role: 'system', content: system() }, { role: 'user', content: 'Hi' }]), stream: true }),
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-warmslot-rewrites'), 'volatile_lines=2');
    let timings;
    await readSse(res, (data) => { if (data !== '[DONE]') timings = JSON.parse(data).timings ?? timings; });
    assert.ok(timings.cache_n >= 0.9 * (timings.cache_n + timings.prompt_n), JSON.stringify(timings));
  } finally {
    await s.stop();
  }
});

test('retrieved documents in a new order reuse the cached ones', { timeout: 300000 }, async () => {
  const s = await setup('rewrite:\n  default:\n    documents:\n      min_bytes: 1KiB\n      order: true\n');
  try {
    const [a, b, c, d] = [701, 702, 703, 704].map((seed) => makeDocument(seed, 2500));
    const instructions = 'Answer from the retrieved documents.';

    // Documents as content parts of the system message.
    const asParts = (docs, q) => send(s, [
      { role: 'system', content: [{ type: 'text', text: instructions }, ...docs.map((text) => ({ type: 'text', text }))] },
      { role: 'user', content: q },
    ]);
    const first = await asParts([a, b, c], 'Which document mentions the orchard?');
    assert.equal(first.rewrites, 'none');
    const second = await asParts([c, a, b], 'Which one mentions the meadow?');
    assert.equal(second.rewrites, 'document_order=1');
    assert.ok(second.cached >= first.total - 600, `reused ${second.cached} of ${second.total}`);
    assert.ok(second.work <= 600, `server computed ${second.work}`);

    // One message per document; a new document joins the cached ones.
    const asMessages = (docs, q) => send(s, [
      { role: 'system', content: instructions },
      ...docs.map((text) => ({ role: 'user', content: text })),
      { role: 'user', content: q },
    ]);
    const abc = await asMessages([a, b, c], 'Which document mentions the orchard?');
    assert.equal(abc.rewrites, 'none');
    const cab = await asMessages([c, a, b], 'Which one mentions the meadow?');
    assert.equal(cab.rewrites, 'document_order=1');
    assert.ok(cab.work <= 600, `server computed ${cab.work} of ${cab.total}`);
    const bdac = await asMessages([b, d, a, c], 'And the violin?');
    assert.equal(bdac.rewrites, 'document_order=1');
    const dTokens = await tokens(s.llama, d);
    assert.ok(bdac.cached >= abc.total - 600, `reused ${bdac.cached}, documents a, b, c: ${abc.total}`);
    assert.ok(bdac.work <= dTokens + 600, `server computed ${bdac.work}, new document ${dTokens}`);
  } finally {
    await s.stop();
  }
});

test('explain needs the API key and shows the rewrite without sending anything', { timeout: 60000 }, async () => {
  const key = 'sk-rewrite-explain-key';
  const ws = await startWarmslot({
    backends: [{ name: 'down', url: `http://127.0.0.1:${await freePort()}` }], apiKeys: [key],
    extra: 'rewrite:\n  models:\n    dated:\n      volatile_lines:\n        presets: [iso_timestamp]\n',
  });
  try {
    const messages = [
      { role: 'system', content: [{ type: 'text', text: 'あなたは港の案内係です。\n生成時刻 2026-11-29T23:59:59Z\n丁寧に答えてください。' }] },
      { role: 'user', content: [{ type: 'text', text: '灯台はどこですか?' }] },
    ];
    const refused = await postJson(`${ws.url}/warmslot/explain`, { model: 'dated', ...body(messages) });
    assert.equal(refused.status, 401);
    assert.equal(refused.body.error.code, 401);
    const auth = { authorization: `Bearer ${key}` };
    const r = await postJson(`${ws.url}/warmslot/explain`, { model: 'dated', ...body(messages) }, auth);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.rewrites, ['volatile_lines=1']);
    assert.equal(r.body.x_warmslot_rewrites, 'volatile_lines=1');
    assert.deepEqual(r.body.request.messages[0].content, [{ type: 'text', text: 'あなたは港の案内係です。\n丁寧に答えてください。' }]);
    assert.deepEqual(r.body.request.messages[1].content, [
      { type: 'text', text: '<context moved-from="system prompt">\n生成時刻 2026-11-29T23:59:59Z\n</context>' },
      { type: 'text', text: '灯台はどこですか?' },
    ]);
    assert.equal(typeof r.body.plan.route, 'string');
    const other = await postJson(`${ws.url}/warmslot/explain`, { model: 'plain', ...body(messages) }, auth);
    assert.equal(other.body.rewrites, null, 'no rule is on for this model');
    assert.deepEqual(other.body.request.messages, messages);
    assert.equal((await getJson(`${ws.url}/warmslot/explain`, { headers: auth })).status, 405);
  } finally {
    await ws.stop();
  }
});
