// Hostile request content against a real llama-server: text the rewrite rules' patterns run
// over is the client's, and can be built to make a backtracking regex engine recurse per byte.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';

// The delimiters of docs/config.md's example.
const rewrite = `rewrite:
  default:
    documents:
      order: true
      edits: append
      delimiters:
        - begin: '<document[^>]*>'
          end: '</document>'
`;

test('a document tag left open over 200 KB is answered, and warmslot keeps serving', { timeout: 180000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra: rewrite });
  try {
    await waitFor('the backend to be healthy', async () => (await getJson(`${ws.url}/health`)).body.status === 'ok', 30000);
    const hostile = `<document ${'a'.repeat(200 * 1024)}`;
    const body = { messages: [{ role: 'user', content: hostile }], max_tokens: 2, temperature: 0 };
    // The rules see the text (explain runs them without prefill) and find no document in it.
    const explained = await postJson(`${ws.url}/warmslot/explain`, body);
    assert.equal(explained.status, 200, JSON.stringify(explained.body).slice(0, 300));
    assert.deepEqual(explained.body.rewrites, []);
    // Sent on, it is llama-server that refuses it: 200 KB of bytes is more than the context.
    const r = await postJson(`${ws.url}/v1/chat/completions`, body);
    assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 300));
    assert.equal(r.body.error.type, 'exceed_context_size_error');
    const ok = await postJson(`${ws.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: '<document id="1">short</document> Hi' }], max_tokens: 2,
    });
    assert.equal(ok.status, 200, JSON.stringify(ok.body).slice(0, 300));
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
