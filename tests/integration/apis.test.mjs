// Every API llama-server speaks, through warmslot: the official Anthropic and OpenAI SDKs get
// exactly what they get straight from llama-server, every other endpoint passes through with its
// query string, and warmslot's own errors come in each API's shape.
//
// Two identical llama-servers: one answers directly, one behind warmslot, so both compute every
// answer from the same (empty) cache and greedy decoding gives the same text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { makeDocument } from './lib/text.mjs';

const apiKey = 'apis-test-key-0123456789';
let direct, behind, ws;

before(async () => {
  [direct, behind] = await Promise.all([startLlama({ ctx: 8192 }), startLlama({ ctx: 8192 })]);
  ws = await startWarmslot({ backends: [{ name: 'tiny', url: behind.url }], apiKeys: [apiKey] });
});

after(async () => {
  await ws?.stop();
  await Promise.all([direct?.stop(), behind?.stop()]);
});

const anthropic = (url, key = apiKey) => new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0 });
const openai = (url, key = apiKey) => new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
const system = makeDocument(11, 1500);
const sampling = { temperature: 0, max_tokens: 12 };

// Runs `call` against llama-server directly and through warmslot; returns both results.
async function both(makeClient, call) {
  const d = await call(makeClient(direct.url));
  const p = await call(makeClient(ws.url));
  return { d, p };
}

const text = (message) => message.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

test('Anthropic SDK: messages.create, messages.stream and countTokens give what llama-server gives', { timeout: 120000 }, async () => {
  const body = { model: 'tiny', ...sampling, system: [{ type: 'text', text: system }],
    messages: [{ role: 'user', content: 'Which line comes first?' }] };
  const created = await both(anthropic, (c) => c.messages.create(body));
  assert.ok(text(created.d).length > 0);
  assert.equal(text(created.p), text(created.d));
  assert.deepEqual(created.p.usage.input_tokens + created.p.usage.cache_read_input_tokens,
    created.d.usage.input_tokens + created.d.usage.cache_read_input_tokens);

  const streamed = await both(anthropic, async (c) => {
    const events = [];
    const s = c.messages.stream({ ...body, messages: [{ role: 'user', content: 'And the last?' }] });
    s.on('streamEvent', (e) => events.push(e.type));
    const final = await s.finalMessage();
    return { final, events };
  });
  assert.equal(text(streamed.p.final), text(streamed.d.final));
  assert.deepEqual(streamed.p.events, streamed.d.events, 'the same named events, in order');
  assert.ok(streamed.p.events.includes('message_start') && streamed.p.events.at(-1) === 'message_stop');

  // The beta client calls /v1/messages?beta=true, as coding agents do.
  const counted = await both(anthropic, (c) => c.beta.messages.countTokens({ model: 'tiny', system, messages: body.messages }));
  assert.ok(counted.d.input_tokens > 1000);
  assert.equal(counted.p.input_tokens, counted.d.input_tokens);
});

test('Anthropic SDK: a tool-use round trip', { timeout: 120000 }, async () => {
  const tools = [{ name: 'get_line', description: 'Reads one line of the document.',
    input_schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] } }];
  const messages = [
    { role: 'user', content: 'Read line 3.' },
    { role: 'assistant', content: [{ type: 'text', text: 'Reading it.' },
      { type: 'tool_use', id: 'toolu_1', name: 'get_line', input: { n: 3 } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'line three' }] }] },
  ];
  const r = await both(anthropic, (c) => c.beta.messages.create({ model: 'tiny', ...sampling, system, tools, messages }));
  assert.equal(r.p.stop_reason, r.d.stop_reason);
  assert.deepEqual(r.p.content, r.d.content);
});

test('OpenAI SDK: responses.create plain and streamed, and chat, give what llama-server gives', { timeout: 120000 }, async () => {
  const body = { model: 'tiny', temperature: 0, max_output_tokens: 12, instructions: system, input: 'Which line comes first?' };
  const plain = await both(openai, (c) => c.responses.create(body));
  assert.ok(plain.d.output_text.length > 0);
  assert.equal(plain.p.output_text, plain.d.output_text);

  const streamed = await both(openai, async (c) => {
    const stream = await c.responses.create({ ...body, input: [{ role: 'user', content: 'And the last?' }], stream: true });
    let out = '';
    const types = [];
    for await (const e of stream) {
      types.push(e.type);
      if (e.type === 'response.output_text.delta') out += e.delta;
    }
    return { out, types };
  });
  assert.equal(streamed.p.out, streamed.d.out);
  assert.deepEqual(streamed.p.types, streamed.d.types);
  assert.equal(streamed.p.types.at(-1), 'response.completed');

  const chat = await both(openai, (c) => c.chat.completions.create({ model: 'tiny', ...sampling,
    messages: [{ role: 'system', content: system }, { role: 'user', content: 'Hi' }] }));
  assert.equal(chat.p.choices[0].message.content, chat.d.choices[0].message.content);
});

test('every other llama-server endpoint passes through, query string included', { timeout: 120000 }, async () => {
  const auth = { authorization: `Bearer ${apiKey}` };
  const posts = [
    ['/tokenize?with=query', { content: 'hello world' }],
    ['/v1/chat/completions/input_tokens', { messages: [{ role: 'user', content: 'hello' }] }],
    ['/v1/responses/input_tokens', { input: 'hello' }],
    ['/infill', { input_prefix: 'def f(', input_suffix: ')', n_predict: 2 }],
    ['/v1/embeddings', { input: 'hello' }],
    ['/embedding', { content: 'hello' }],
    ['/rerank', { query: 'a', documents: ['a', 'b'] }],
    ['/v1/reranking', { query: 'a', documents: ['a', 'b'] }],
    ['/apply-template', { messages: [{ role: 'user', content: 'hello' }] }],
  ];
  for (const [path, body] of posts) {
    const d = await postJson(`${direct.url}${path}`, body);
    const p = await postJson(`${ws.url}${path}`, body, auth);
    assert.equal(p.status, d.status, `${path}: ${JSON.stringify(p.body).slice(0, 200)}`);
    if (d.status === 200 && path !== '/infill') assert.deepEqual(p.body, d.body, path);
  }
  const adapters = await getJson(`${ws.url}/lora-adapters`, { headers: auth });
  assert.equal(adapters.status, 200);
  assert.deepEqual(adapters.body, (await getJson(`${direct.url}/lora-adapters`)).body);
  const setAdapters = await postJson(`${ws.url}/lora-adapters`, [], auth);
  assert.equal(setAdapters.status, 405, 'changing adapters would change every slot behind warmslot');
});

test('warmslot\'s own errors: the Anthropic shape on /v1/messages*, the OpenAI shape elsewhere', { timeout: 60000 }, async () => {
  const noKey = await postJson(`${ws.url}/v1/messages?beta=true`, { model: 'tiny', messages: [] });
  assert.equal(noKey.status, 401);
  assert.deepEqual(Object.keys(noKey.body).sort(), ['error', 'type']);
  assert.equal(noKey.body.type, 'error');
  assert.equal(noKey.body.error.type, 'authentication_error');
  await assert.rejects(anthropic(ws.url, 'wrong-key-000000').messages.create({ model: 'tiny', max_tokens: 4,
    messages: [{ role: 'user', content: 'x' }] }), (e) => e.status === 401 && e.error?.error?.type === 'authentication_error');

  const bad = await fetch(`${ws.url}/v1/messages/count_tokens`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': apiKey }, body: '{"messages": [',
  });
  assert.equal(bad.status, 400);
  const badBody = await bad.json();
  assert.equal(badBody.type, 'error');
  assert.equal(badBody.error.type, 'invalid_request_error');

  const chatNoKey = await postJson(`${ws.url}/v1/responses`, { input: 'x' });
  assert.equal(chatNoKey.status, 401);
  assert.equal(chatNoKey.body.error.code, 401);
  await assert.rejects(openai(ws.url, 'wrong-key-000000').responses.create({ model: 'tiny', input: 'x' }),
    (e) => e.status === 401);

  // The x-api-key header is accepted on every endpoint, and never forwarded.
  const viaHeader = await postJson(`${ws.url}/tokenize`, { content: 'a' }, { 'x-api-key': apiKey });
  assert.equal(viaHeader.status, 200);
});
