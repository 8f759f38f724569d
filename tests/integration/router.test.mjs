// A llama-server in router mode behind warmslot, on real processes: two test models (one hybrid)
// and --models-max 1. A document asked about on model A, then a question on model B, then on A
// again: the router unloads A to load B (and B to load A), which loses A's slots; warmslot saves
// A's document before it unloads A itself, so the third question costs the question, where the
// router alone computes the whole document again. A request in flight on A when B is asked for
// ends whole: the switch waits for it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { getJson, postJson, routerStatus, startRouter } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const models = { 'tiny-llama': 'llama', 'tiny-qwen': 'qwen35' };
const settings = 'routing:\n  reconcile_interval: 1s\ncache:\n  min_prefix_tokens: 1024\n';

// A router with the two test models (--models-max 1), and warmslot in front of it serving the
// router's models `ids`; `fn(router, ws)` runs between their start and their stop.
async function withRouter(ids, fn) {
  const router = await startRouter({ models, max: 1 });
  let ws;
  try {
    ws = await startWarmslot({
      backends: [{ name: 'r', url: router.url, slotSaveDir: router.saveDir,
        lines: ['router: true', `models: [${ids.join(', ')}]`] }],
      extra: settings });
    await fn(router, ws);
  } finally {
    await ws?.stop();
    await router.stop();
  }
}

async function ask(url, model, doc, q, extra = {}) {
  const r = await postJson(`${url}/v1/chat/completions`, { model, ...chat(doc, q), ...extra });
  assert.equal(r.status, 200, `${model}: ${JSON.stringify(r.body)}`);
  return { r, processed: r.body.timings.prompt_n, disk: r.headers.get('x-warmslot-disk') ?? '',
    primed: Number(r.headers.get('x-warmslot-primed-tokens') ?? 0) };
}

// At most the question's turn and 64 tokens: everything before it came from a cache. Tokenized
// by the model's own server, which is loaded (it just answered).
async function assertOnlyQuestion(routerUrl, model, answer, q, what) {
  const t = await postJson(`${routerUrl}/tokenize`, { model,
    content: `<|im_start|>user\n${q}<|im_end|>\n<|im_start|>assistant\n`, parse_special: true });
  assert.equal(t.status, 200, JSON.stringify(t.body));
  const bound = t.body.tokens.length + 64;
  assert.ok(answer.processed <= bound, `${what}processed ${answer.processed}, bound ${bound}`);
}

// A streamed answer of `tokens` tokens, read to its end: its finish reason, or what cut it.
async function streamed(url, model, doc, q, tokens) {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, ...chat(doc, q), max_tokens: tokens, stream: true, ignore_eos: true }),
  });
  assert.equal(res.status, 200);
  const text = await res.text();
  const finish = [...text.matchAll(/"finish_reason":"(\w+)"/g)].map((m) => m[1]);
  return { done: text.includes('data: [DONE]'), finish: finish.at(-1) };
}

test('router with --models-max 1: switching models and back costs the question, not the document', { timeout: 300000 }, async () => {
  await withRouter(Object.keys(models), async (router, ws) => {
    // Nothing is loaded: warmslot's checks do not load a model.
    await waitFor('both models checked', async () => {
      const h = (await getJson(`${ws.url}/health`)).body;
      return h.backends?.length === 2 && h.backends.every((b) => b.status === 'ok');
    }, 30000);
    assert.deepEqual(await routerStatus(router.url), { 'tiny-llama': 'unloaded', 'tiny-qwen': 'unloaded' });
    // Each model is listed once, by its own backend, with what the router says of it (once the
    // monitor has looked at both).
    await waitFor('both models seen unloaded', async () =>
      (await getJson(`${ws.url}/warmslot/status`)).body.backends.every((b) => b.asleep), 30000);
    const listed = (await getJson(`${ws.url}/v1/models`)).body.data;
    assert.deepEqual(listed.map((m) => [m.id, m.owned_by, m.state]).sort(),
      [['tiny-llama', 'r.tiny-llama', 'unloaded'], ['tiny-qwen', 'r.tiny-qwen', 'unloaded']]);
    const shown = (await getJson(`${ws.url}/warmslot/status`)).body.backends;
    assert.deepEqual(shown.map((b) => [b.name, b.router, b.router_model, b.asleep]),
      [['r.tiny-llama', 'r', 'tiny-llama', true], ['r.tiny-qwen', 'r', 'tiny-qwen', true]]);

    for (const [a, b, seed] of [['tiny-llama', 'tiny-qwen', 9101], ['tiny-qwen', 'tiny-llama', 9202]]) {
      const doc = makeDocument(seed, 6000);
      const first = await ask(ws.url, a, doc, 'What comes first?');
      // Loaded and read before it is planned: its document is primed and saved on the way.
      assert.ok(first.processed + first.primed > 1000, `${a} first: ${first.processed}`);
      assert.match(first.disk, /snapshot \d+ tokens/);
      // The router passes answers on chunked: their timings are read all the same, so warmslot
      // knows what the slot holds.
      await waitFor('the first answer logged', async () => fs.readFileSync(ws.logFile, 'utf8')
        .includes(`backend=r.${a}`), 5000);
      const line = fs.readFileSync(ws.logFile, 'utf8').split('\n').find((l) => l.includes(`POST /v1/chat/completions 200 backend=r.${a}`));
      assert.match(line, /cached=\d+ processed=\d+/, line);
      await waitFor(`${a} routed`, async () =>
        (await getJson(`${ws.url}/health`)).body.backends.find((x) => x.name === `r.${a}`)?.routing, 30000);

      // A long answer on A is running when B is asked for: it ends whole.
      const running = streamed(ws.url, a, doc, 'Tell it all.', 1500);
      await new Promise((r) => setTimeout(r, 100));
      const other = await ask(ws.url, b, makeDocument(seed + 1, 2000), 'Anything?');
      assert.match(other.disk, new RegExp(`^unloaded ${a}: (1 slot saved \\(\\d+ tokens\\)|1 already on disk|nothing new to save)(;|$)`));
      const long = await running;
      assert.ok(long.done && long.finish === 'length', `the answer on ${a} ended whole: ${JSON.stringify(long)}`);
      assert.equal((await routerStatus(router.url))[a], 'unloaded');
      // Saves asked of every model load none (and checks, and the status, read none).
      assert.equal((await postJson(`${ws.url}/admin/snapshot`, {})).status, 200);
      assert.equal((await routerStatus(router.url))[a], 'unloaded');
      // As warmslot's next check at the latest sees them.
      const states = async () => JSON.stringify(Object.fromEntries(
        (await getJson(`${ws.url}/v1/models`)).body.data.map((m) => [m.id, m.state])));
      await waitFor(`${a} unloaded and ${b} running`, async () =>
        (await states()) === JSON.stringify({ [a]: 'unloaded', [b]: 'running' }) ||
        (await states()) === JSON.stringify({ [b]: 'running', [a]: 'unloaded' }), 10000);

      // Back on A: its document comes back from its file.
      const back = await ask(ws.url, a, doc, 'What comes last?');
      assert.match(back.disk, new RegExp(`^unloaded ${b}: .*; restored \\d+ tokens`));
      await assertOnlyQuestion(router.url, a, back, 'What comes last?', `${a} after ${b}: `);
    }

    // The router alone: back on a model after another one, the whole document again.
    const doc = makeDocument(9303, 6000);
    const direct = (m, q) => postJson(`${router.url}/v1/chat/completions`, { model: m, ...chat(doc, q) });
    assert.equal((await direct('tiny-llama', 'What comes first?')).status, 200);
    assert.equal((await direct('tiny-qwen', 'Anything?')).status, 200);
    const alone = await direct('tiny-llama', 'What comes last?');
    assert.equal(alone.status, 200);
    assert.ok(alone.body.timings.prompt_n > 1000, `router alone: ${alone.body.timings.prompt_n}`);
  });
});

test('router with --models-max 1: a burst for two models switches between them a few times, not at every request', { timeout: 300000 }, async () => {
  // A model the router does not have (a typo in the config): said in the log, never used.
  await withRouter([...Object.keys(models), 'tiny-typo'], async (router, ws) => {
    await waitFor('the unlisted model reported', async () =>
      /the router on \S+ does not list model tiny-typo/.test(fs.readFileSync(ws.logFile, 'utf8')), 30000);
    const docs = { 'tiny-llama': makeDocument(9401, 4000), 'tiny-qwen': makeDocument(9402, 4000) };
    const order = Array.from({ length: 8 }, (_, i) => (i % 2 ? 'tiny-qwen' : 'tiny-llama'));
    const answers = await Promise.all(order.map((m, i) =>
      postJson(`${ws.url}/v1/chat/completions`, { model: m, ...chat(docs[m], `Question ${i}?`) })));
    for (const [i, r] of answers.entries()) assert.equal(r.status, 200, `${order[i]}: ${JSON.stringify(r.body)}`);
    const switches = (fs.readFileSync(ws.logFile, 'utf8').match(/unloaded model /g) ?? []).length;
    // Four requests each: one switch to the second model, maybe one back; never one a request.
    assert.ok(switches <= 2, `${switches} switches for 8 requests`);
    const typo = await postJson(`${ws.url}/v1/chat/completions`, { model: 'tiny-typo', ...chat('x', 'y') });
    // Tried there as a last resort: the router's own answer.
    assert.equal(typo.status, 400);
    assert.match(JSON.stringify(typo.body), /tiny-typo/);
  });
});

test('router: the OpenAI and Anthropic SDKs reach each model through warmslot, streamed and not', { timeout: 300000 }, async () => {
  await withRouter(Object.keys(models), async (router, ws) => {
    const openai = new OpenAI({ baseURL: `${ws.url}/v1`, apiKey: 'none', maxRetries: 0 });
    const anthropic = new Anthropic({ baseURL: ws.url, apiKey: 'none', maxRetries: 0 });
    const doc = makeDocument(9501, 3000);
    for (const model of ['tiny-qwen', 'tiny-llama', 'tiny-qwen']) {
      const chatted = await openai.chat.completions.create({ model, ...chat(doc, 'First?') });
      assert.equal(chatted.model, model);
      assert.equal(chatted.choices[0].finish_reason, 'length');
      const stream = await openai.chat.completions.create({ model, ...chat(doc, 'Second?'), stream: true });
      let finish = null;
      for await (const part of stream) finish = part.choices[0]?.finish_reason ?? finish;
      assert.equal(finish, 'length');
      const messages = await anthropic.messages.create({ model, max_tokens: 4, temperature: 0,
        system: doc, messages: [{ role: 'user', content: 'Third?' }] });
      assert.equal(messages.type, 'message');
      assert.equal(messages.stop_reason, 'max_tokens');
      const events = anthropic.messages.stream({ model, max_tokens: 4, temperature: 0,
        system: doc, messages: [{ role: 'user', content: 'Fourth?' }] });
      const final = await events.finalMessage();
      assert.equal(final.stop_reason, 'max_tokens');
    }
    assert.equal((await routerStatus(router.url))['tiny-qwen'], 'loaded');
  });
});
