// The cache for Anthropic Messages and OpenAI Responses, as for chat: a known system part is
// reused after other traffic has taken both slots, and restored from disk after a backend
// restart, on the plain and the hybrid model. Token counts come from llama-server's own /metrics.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { getJson, postJson, questionTokens, restartLlama, snapshotFiles, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';

async function promptTokensTotal(llama) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)?.[1] ?? NaN);
}

const shapes = {
  messages: {
    path: '/v1/messages',
    body: (doc, q) => ({ model: 'tiny', max_tokens: 4, temperature: 0,
      system: [{ type: 'text', text: doc }], messages: [{ role: 'user', content: q }] }),
    usage: (b) => ({ cached: b.usage.cache_read_input_tokens, processed: b.usage.input_tokens }),
  },
  responses: {
    path: '/v1/responses',
    body: (doc, q) => ({ model: 'tiny', max_output_tokens: 4, temperature: 0, instructions: doc, input: q }),
    usage: (b) => ({ cached: b.usage.input_tokens_details.cached_tokens,
      processed: b.usage.input_tokens - b.usage.input_tokens_details.cached_tokens }),
  },
};

async function corrections(ws) {
  const m = (await (await fetch(`${ws.url}/metrics`)).text()).match(/warmslot_belief_corrections_total (\d+)/);
  return Number(m[1]);
}

// One request; what llama-server computed for it (its /metrics, warmslot's own priming included).
async function ask(ws, llama, shape, doc, q) {
  const before = await promptTokensTotal(llama);
  const r = await postJson(`${ws.url}${shape.path}`, shape.body(doc, q));
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  const computed = (await promptTokensTotal(llama)) - before;
  return { computed, usage: shape.usage(r.body), disk: r.headers.get('x-warmslot-disk') ?? '',
    route: r.headers.get('x-warmslot-route'), processedHeader: Number(r.headers.get('x-warmslot-processed-tokens')) };
}

async function assertQuestionOnly(answer, llama, q, what) {
  const bound = (await questionTokens(llama.url, q)) + 64;
  assert.ok(answer.computed <= bound, `${what}: llama-server computed ${answer.computed}, bound ${bound} (${JSON.stringify(answer)})`);
}

for (const arch of ['llama', 'qwen35']) {
  for (const [name, shape] of Object.entries(shapes)) {
    test(`${arch} ${name}: a known 8K-token system part costs only the question, after other traffic and after a restart`, { timeout: 400000 }, async (t) => {
      let llama = await startLlama({ arch, slots: 2, ctx: 16384 });
      const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
      try {
        await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
        const doc = makeDocument(arch.length * 100 + name.length, 8000);
        const first = await ask(ws, llama, shape, doc, 'What is on the first line?');
        assert.match(first.disk, /^snapshot \d+ tokens$/, JSON.stringify(first));
        assert.ok(first.usage.cached + first.usage.processed > 7000, JSON.stringify(first));
        assert.equal(first.processedHeader, first.computed,
          'X-Warmslot-Processed-Tokens: the API\'s own usage plus warmslot\'s priming, as llama-server counts them');
        assert.equal(snapshotFiles(llama.saveDir).length, 1);

        // Other clients, straight to llama-server, take both slots; warmslot sees it in GET /slots.
        const seen = await corrections(ws);
        for (const slot of [0, 1]) {
          const r = await postJson(`${llama.url}/v1/chat/completions`, { ...chat(makeDocument(slot + 1, 3000), 'Hi'), id_slot: slot });
          assert.equal(r.status, 200);
        }
        await waitFor('warmslot to see the slot it used change', async () => (await corrections(ws)) > seen, 10000);
        const q2 = 'And what is on the second line?';
        const second = await ask(ws, llama, shape, doc, q2);
        assert.notEqual(second.route, 'hit', JSON.stringify(second));
        await assertQuestionOnly(second, llama, q2, 'after other traffic');

        const before = await corrections(ws);
        llama = await restartLlama(llama);
        await waitFor('warmslot to notice the restart', async () => (await corrections(ws)) > before, 10000);
        const q3 = 'And what is on the last line?';
        const third = await ask(ws, llama, shape, doc, q3);
        assert.match(third.disk, /^restored \d+ tokens$/, JSON.stringify(third));
        await assertQuestionOnly(third, llama, q3, 'after a restart');
        t.diagnostic(JSON.stringify({ first, second, third }));
      } finally {
        await ws.stop();
        await llama.stop();
      }
    });
  }
}
