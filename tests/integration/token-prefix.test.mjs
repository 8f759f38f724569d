// Files keyed by tokens, against real llama-server processes: where prompts of different sessions
// part ways inside one message (no message boundary there), warmslot learns the split point and
// saves the common part, which a later session restores after a llama-server restart; the split
// point itself is kept with the index across a warmslot restart; a file saved from one API shape
// restores for another that renders the same tokens.
import { test } from 'node:test';
import fs from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { getJson, postJson, restartLlama, snapshotFiles, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';

async function llamaMetric(llama, name) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(new RegExp(`^llamacpp:${name} (\\d+)`, 'm'))?.[1] ?? NaN);
}

async function warmslotMetric(ws, name) {
  const text = await (await fetch(`${ws.url}/metrics`)).text();
  return Number(text.match(new RegExp(`^${name} (\\d+)`, 'm'))?.[1] ?? NaN);
}

async function tokens(url, text) {
  const r = await postJson(`${url}/tokenize`, { content: text, add_special: false });
  return r.body.tokens.length;
}

// One request through warmslot: its answer, its disk action and what llama-server computed.
async function send(llama, ws, route, body) {
  const before = await llamaMetric(llama, 'prompt_tokens_total');
  const r = await postJson(`${ws.url}${route}`, body);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { disk: r.headers.get('x-warmslot-disk') ?? '', body: r.body,
    computed: (await llamaMetric(llama, 'prompt_tokens_total')) - before };
}

async function restart(llama, ws) {
  const seen = await warmslotMetric(ws, 'warmslot_belief_corrections_total');
  const next = await restartLlama(llama);
  await waitFor('warmslot to notice the restart', async () =>
    (await warmslotMetric(ws, 'warmslot_belief_corrections_total')) > seen, 15000);
  return next;
}

async function routed(ws) {
  await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
}

for (const arch of ['llama', 'qwen35']) {
  // An agent's one user message: the same long context (environment, project rules) then the
  // session's own task. The message layout has no stable part at all; only the tokens show where
  // sessions part ways.
  test(`${arch}: sessions that part ways inside one message: the common part is learned, saved and restored after a restart`, { timeout: 300000 }, async () => {
    let llama = await startLlama({ arch, slots: 2, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    try {
      await routed(ws);
      const common = makeDocument(740, 6000);
      const session = (n) => ({
        messages: [{ role: 'user', content: `${common}\n\nTask ${n}: ${makeDocument(741 + n, 600)}` }],
        max_tokens: 4, temperature: 0, seed: 42,
      });
      const first = await send(llama, ws, '/v1/chat/completions', session(1));
      assert.equal(first.disk, '', 'one prompt alone shows no split point');
      const second = await send(llama, ws, '/v1/chat/completions', session(2));
      const saved = second.disk.match(/^snapshot (\d+) tokens/);
      assert.ok(saved, `the second session saves the common part (${second.disk})`);
      const commonTokens = await tokens(llama.url, common);
      assert.ok(Number(saved[1]) >= commonTokens - 128 && Number(saved[1]) <= commonTokens + 64,
        `the file ends where the sessions part ways (${saved[1]} of ${commonTokens} common tokens)`);

      llama = await restart(llama, ws);
      const third = await send(llama, ws, '/v1/chat/completions', session(3));
      assert.match(third.disk, new RegExp(`^restored ${saved[1]} tokens`));
      const whole = third.body.usage.prompt_tokens;
      assert.ok(third.computed <= whole - Number(saved[1]) + 64,
        `after the restart only the session's own part is computed (${third.computed} of ${whole})`);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });

  test(`${arch}: a file saved from Chat Completions restores for Messages that render the same tokens`, { timeout: 300000 }, async () => {
    let llama = await startLlama({ arch, slots: 2, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    try {
      await routed(ws);
      const doc = makeDocument(750, 6000);
      const first = await send(llama, ws, '/v1/chat/completions', chat(doc, 'What is on the first line?'));
      const saved = first.disk.match(/^snapshot (\d+) tokens/);
      assert.ok(saved, first.disk);
      llama = await restart(llama, ws);
      const q = 'Which word comes last?';
      const second = await send(llama, ws, '/v1/messages', {
        model: 'm', system: doc, messages: [{ role: 'user', content: q }], max_tokens: 4, temperature: 0,
      });
      assert.match(second.disk, new RegExp(`^restored ${saved[1]} tokens`));
      assert.ok(second.computed < 200, `only the question was computed (${second.computed})`);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

// Where sessions part ways is kept with the slot directory's index: after warmslot restarts (and
// the file of the common part is gone), the next session that passes the split point primes and
// saves the common part again without two new sessions to learn it from.
test('llama: a learned split point survives a warmslot restart', { timeout: 300000 }, async () => {
  let llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const backends = [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }];
  let ws = await startWarmslot({ backends, extra: settings });
  try {
    await routed(ws);
    const common = makeDocument(760, 5000);
    const session = (n) => ({
      messages: [{ role: 'user', content: `${common}\n\nTask ${n}: ${makeDocument(761 + n, 600)}` }],
      max_tokens: 4, temperature: 0, seed: 42,
    });
    await send(llama, ws, '/v1/chat/completions', session(1));
    const second = await send(llama, ws, '/v1/chat/completions', session(2));
    const saved = second.disk.match(/^snapshot (\d+) tokens/);
    assert.ok(saved, second.disk);
    await ws.stop();
    for (const f of snapshotFiles(llama.saveDir)) fs.rmSync(path.join(llama.saveDir, f));
    llama = await restartLlama(llama);
    ws = await startWarmslot({ backends, extra: settings });
    await routed(ws);
    const third = await send(llama, ws, '/v1/chat/completions', session(3));
    assert.equal(third.disk, `snapshot ${saved[1]} tokens`, 'the split point learned before the restart');
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
