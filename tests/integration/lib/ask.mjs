// One chat request through warmslot and what its answer says about the cache, for the disk-tier
// tests; `diskSettings` turns the disk tier on for short test documents.
import assert from 'node:assert/strict';
import { postJson } from './llama.mjs';
import { chat } from './text.mjs';

export const diskSettings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';

export async function askChat(ws, system, question) {
  const r = await postJson(`${ws.url}/v1/chat/completions`, chat(system, question));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return {
    disk: r.headers.get('x-warmslot-disk') ?? '',
    route: r.headers.get('x-warmslot-route'),
    processed: r.body.timings.prompt_n,
    cached: r.body.timings.cache_n,
  };
}
