// warmslot in front of a real llama-server: the pass-through contract.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import OpenAI from 'openai';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { readSse, startWarmslot } from './lib/warmslot.mjs';

const apiKey = 'test-key-0123456789';
const auth = { authorization: `Bearer ${apiKey}` };
let llama;
let ws;

before(async () => {
  llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  ws = await startWarmslot({ backends: [{ name: 'tiny', url: llama.url }], apiKeys: [apiKey] });
  // warmslot's first check probes the slots with tiny prompts of its own; a request decoded in
  // the same batch as one of them gets other floating-point results, so the direct reference
  // answers below would differ from a lone request's. Wait until the probe is over.
  await waitFor('routing', async () =>
    (await getJson(`${ws.url}/health`, { headers: auth })).body.backends?.[0]?.routing, 30000);
});

after(async () => {
  await ws?.stop();
  await llama?.stop();
});

const chatBody = (extra = {}) => ({
  messages: [{ role: 'system', content: 'You are a test. 日本語も。' }, { role: 'user', content: 'Say something.' }],
  max_tokens: 24, temperature: 0, seed: 7, ...extra,
});

async function streamedText(base, headers) {
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(chatBody({ stream: true })),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/event-stream/);
  let text = '';
  let done = false;
  let timings = null;
  await readSse(res, (data) => {
    if (data === '[DONE]') { done = true; return; }
    const ev = JSON.parse(data);
    text += ev.choices?.[0]?.delta?.content ?? '';
    timings = ev.timings ?? timings;
  });
  return { text, done, timings, headers: res.headers };
}

test('non-streaming chat gives the same text through warmslot as direct', async () => {
  const direct = await postJson(`${llama.url}/v1/chat/completions`, chatBody());
  const proxied = await postJson(`${ws.url}/v1/chat/completions`, chatBody(), auth);
  assert.equal(proxied.status, 200);
  assert.equal(proxied.body.choices[0].message.content, direct.body.choices[0].message.content);
  assert.ok(proxied.body.choices[0].message.content.length > 0);
  assert.equal(proxied.headers.get('x-warmslot-backend'), 'tiny');
});

test('streaming chat gives the same text through warmslot as direct', async () => {
  const direct = await streamedText(llama.url, {});
  const proxied = await streamedText(ws.url, auth);
  assert.equal(proxied.text, direct.text);
  assert.ok(proxied.done, 'stream ends with [DONE]');
  assert.ok(proxied.timings && proxied.timings.prompt_n >= 1, 'timings relayed');
});

// llama-server closes its side of a connection after an answer it streamed (though the answer
// allows keep-alive): warmslot must not pool it, or the next request meets it dead and takes
// that for a sign of a restart (a check of the backend before every request after a stream).
test('streamed answers one after another: no request meets a dead pooled connection', async () => {
  for (let i = 0; i < 3; i++) {
    const r = await streamedText(ws.url, auth);
    assert.ok(r.done, 'stream ends with [DONE]');
  }
  const plain = await postJson(`${ws.url}/v1/chat/completions`, chatBody(), auth);
  assert.equal(plain.status, 200);
  const checks = fs.readFileSync(ws.logFile, 'utf8').split('\n')
    .filter((l) => / access: .*POST \/v1\/chat\/completions/.test(l) && /restart check/.test(l));
  assert.deepEqual(checks, [], 'no restart check after a streamed answer');
});

test('the official openai client works with warmslot as its base URL', async () => {
  const client = new OpenAI({ baseURL: `${ws.url}/v1`, apiKey, maxRetries: 0 });
  const chat = await client.chat.completions.create({ model: 'tiny', ...chatBody() });
  assert.ok(chat.choices[0].message.content.length > 0);

  const stream = await client.chat.completions.create({ model: 'tiny', ...chatBody({ stream: true }) });
  let streamed = '';
  for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(streamed, chat.choices[0].message.content);

  const completion = await client.completions.create({ model: 'tiny', prompt: 'Once upon', max_tokens: 8, temperature: 0 });
  assert.ok(completion.choices[0].text.length > 0);

  const models = await client.models.list();
  assert.ok(models.data.length >= 1 && typeof models.data[0].id === 'string');

  const denied = new OpenAI({ baseURL: `${ws.url}/v1`, apiKey: 'wrong-key-000000', maxRetries: 0 });
  await assert.rejects(denied.models.list(), (e) => e.status === 401);
});

test('errors come in the OpenAI shape', async () => {
  const bad = await fetch(`${ws.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body: '{"messages": [',
  });
  assert.equal(bad.status, 400, 'malformed JSON is a 400 (llama-server itself answers 500)');
  const body = await bad.json();
  assert.equal(typeof body.error.message, 'string');
  assert.equal(body.error.type, 'invalid_request_error');
  assert.equal(body.error.code, 400);

  const unknown = await getJson(`${ws.url}/v1/nothing`, { headers: auth });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.body.error.code, 404);

  const noKey = await postJson(`${ws.url}/v1/chat/completions`, chatBody());
  assert.equal(noKey.status, 401);
  assert.equal(noKey.body.error.type, 'authentication_error');

  const slotSave = await postJson(`${ws.url}/slots/0?action=save`, { filename: 'x.bin' }, auth);
  assert.equal(slotSave.status, 404, 'slot actions are not exposed');
});

test('/health: the bare status without a key, warmslot and its backends with one', async () => {
  const anonymous = await getJson(`${ws.url}/health`);
  assert.equal(anonymous.status, 200);
  assert.deepEqual(anonymous.body, { status: 'ok' }, 'no backend names or URLs without the key');
  const health = await getJson(`${ws.url}/health`, { headers: auth });
  assert.equal(health.status, 200);
  assert.equal(health.body.status, 'ok');
  assert.deepEqual(health.body.backends.map((b) => [b.name, b.status]), [['tiny', 'ok']]);
});

async function predictedTotal() {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:tokens_predicted_total (\d+)/m)?.[1] ?? NaN);
}

test('a client disconnect mid-stream frees the llama-server slot within 2 s', async () => {
  const before = await predictedTotal();
  const controller = new AbortController();
  const res = await fetch(`${ws.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify(chatBody({ stream: true, max_tokens: 6000 })), signal: controller.signal,
  });
  // Read a few events without leaving the stream (leaving it would cancel the body).
  const reader = res.body.getReader();
  let seen = '';
  while ((seen.match(/\n\n/g) ?? []).length < 3) seen += new TextDecoder().decode((await reader.read()).value);
  const t0 = Date.now();
  controller.abort();
  await waitFor('slot to become idle', async () =>
    !(await getJson(`${llama.url}/slots`)).body.some((s) => s.is_processing), 2000, 25);
  assert.ok(Date.now() - t0 <= 2000);
  // The generation was cancelled, not finished: far fewer than the 6,000 tokens asked for.
  const generated = (await predictedTotal()) - before;
  assert.ok(generated < 6000, `generated ${generated} tokens`);
});

test('a killed backend gives a clean error, before and during a stream', async () => {
  const victim = await startLlama({ arch: 'llama', slots: 1, ctx: 8192 });
  const front = await startWarmslot({ backends: [{ name: 'victim', url: victim.url }] });
  try {
    const res = await fetch(`${front.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chatBody({ stream: true, max_tokens: 6000 })),
    });
    const seen = [];
    await readSse(res, async (data) => {
      seen.push(data);
      if (seen.length === 2) await victim.proc.stop('SIGKILL');
    });
    const last = JSON.parse(seen.at(-1));
    assert.equal(last.error?.type, 'server_error', `last event: ${seen.at(-1)}`);
    assert.ok(seen.length >= 3);

    const after = await postJson(`${front.url}/v1/chat/completions`, chatBody());
    assert.equal(after.status, 502);
    assert.equal(after.body.error.code, 502);
    assert.match(after.body.error.message, /backend/);
  } finally {
    await front.stop();
    await victim.stop();
  }
});
