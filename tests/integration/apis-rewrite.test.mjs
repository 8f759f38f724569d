// The rewrite rules on Anthropic Messages and OpenAI Responses requests, against llama-server
// running a real model family's chat template (Qwen3.5's, from the pinned llama.cpp source).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { getJson, llamaServerBin, postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { makeDocument } from './lib/text.mjs';

// The templates ship in the source tree next to the cached build (absent with LLAMA_SERVER).
const template = path.join(path.dirname(llamaServerBin()), '../../src/models/templates/Qwen3.5-4B.jinja');
const skip = fs.existsSync(template) ? false : `no ${template} (LLAMA_SERVER set?)`;
const rules = 'rewrite:\n  default:\n    system_messages: front\n    volatile_lines:\n      presets: [date]\n';

async function promptTokensTotal(llama) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)?.[1] ?? NaN);
}

test('a coding agent\'s late system message: llama-server refuses it with this template, warmslot moves it to the front', { skip, timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'qwen35', slots: 2, ctx: 16384, extra: ['--jinja', '--chat-template-file', template] });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: rules });
  try {
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const system = [{ type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.0; cc_entrypoint=cli; cch=0a1b2;' },
      { type: 'text', text: `You are a coding agent.\n${makeDocument(61, 3000)}`, cache_control: { type: 'ephemeral' } }];
    const request = (q, cch) => ({
      model: 'agent', max_tokens: 4, temperature: 0,
      system: [{ ...system[0], text: system[0].text.replace('0a1b2', cch) }, system[1]],
      tools: [{ name: 'read', description: 'Reads a file.', input_schema: { type: 'object', properties: { path: { type: 'string' } } } }],
      messages: [{ role: 'user', content: [{ type: 'text', text: '<system-reminder>Today is 2026-12-01.</system-reminder>' }, { type: 'text', text: q }] },
        { role: 'system', content: `Agent types:\n${makeDocument(62, 2000)}` }],
    });
    const direct = await postJson(`${llama.url}/v1/messages`, request('Fix the bug.', 'aaaaa'));
    assert.equal(direct.status, 500, 'this template refuses a system message after the first user turn');
    assert.match(JSON.stringify(direct.body), /System message must be at the beginning/);

    const first = await postJson(`${ws.url}/v1/messages`, request('Fix the bug.', 'bbbbb'));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.headers.get('x-warmslot-rewrites'), 'system_to_front=1');
    // A new session: other question, other billing hash; everything before the question is reused.
    const before = await promptTokensTotal(llama);
    const second = await postJson(`${ws.url}/v1/messages`, request('Explain the failing test.', 'ccccc'));
    assert.equal(second.status, 200);
    const computed = (await promptTokensTotal(llama)) - before;
    const total = second.body.usage.input_tokens + second.body.usage.cache_read_input_tokens;
    assert.ok(total > 5000, `prompt of ${total} tokens`);
    assert.ok(computed <= 0.1 * total, `a new session computed ${computed} of ${total} tokens`);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('Responses: a dated line in the instructions moves to the input, so the next day reuses the instructions', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra: rules });
  try {
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const doc = makeDocument(63, 6000);
    const request = (day, q) => ({ model: 'm', max_output_tokens: 4, temperature: 0,
      instructions: `Current date: 2026-12-${day}\n${doc}`, input: q });
    const first = await postJson(`${ws.url}/v1/responses`, request('01', 'What is on line one?'));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.headers.get('x-warmslot-rewrites'), 'volatile_lines=1');
    const before = await promptTokensTotal(llama);
    const second = await postJson(`${ws.url}/v1/responses`, request('02', 'And on line two?'));
    assert.equal(second.status, 200);
    const computed = (await promptTokensTotal(llama)) - before;
    assert.ok(computed <= 150, `the next day computed ${computed} tokens (the question and the moved line)`);
    assert.ok(second.body.usage.input_tokens_details.cached_tokens > 5000);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
