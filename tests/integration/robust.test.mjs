// Requests a service meets: bodies built to exhaust the stack, and a burst of streams followed
// by more requests on the connections the burst left behind.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { postJson, startLlama } from './lib/llama.mjs';
import { readSse, startWarmslot } from './lib/warmslot.mjs';
import { chat } from './lib/text.mjs';

test('a body of a million nested brackets is refused (401 without a key, 400 with one) and warmslot lives on', { timeout: 120000 }, async () => {
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  const key = 'robust-test-key-0123';
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], apiKeys: [key],
    extra: 'limits:\n  max_body_bytes: 4MiB\n' });
  try {
    const deep = `{"messages":[{"role":"user","content":"hi"}],"x":${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}}`;
    for (const path of ['/v1/chat/completions', '/v1/messages', '/v1/responses']) {
      const anonymous = await fetch(`${ws.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: deep });
      assert.equal(anonymous.status, 401, path);
      await anonymous.text();
      const keyed = await fetch(`${ws.url}${path}`, { method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: deep });
      assert.equal(keyed.status, 400, path);
      const body = await keyed.json();
      assert.match(JSON.stringify(body), /deeper than 128 levels/, path);
    }
    const ok = await postJson(`${ws.url}/v1/chat/completions`, chat('You are brief.', 'Hi'), { authorization: `Bearer ${key}` });
    assert.equal(ok.status, 200);
  } finally {
    await ws.stop();  // fails the test if warmslot died
    await llama.stop();
  }
});

test('a burst of 64 streams on a 4-slot server, then 20 requests one after another: no 5xx', { timeout: 300000 }, async () => {
  const llama = await startLlama({ slots: 4, ctx: 4096 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }] });
  try {
    const stream = async (i) => {
      const res = await fetch(`${ws.url}/v1/chat/completions`, { method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(chat(`You are assistant number ${i}.`, `Say something about ${i}.`, { stream: true, max_tokens: 8 })) });
      let error = null;
      if (res.status === 200) {
        await readSse(res, (data) => { if (data !== '[DONE]' && JSON.parse(data).error) error = data; });
      } else {
        error = `${res.status} ${await res.text()}`;
      }
      return error;
    };
    const burst = await Promise.all(Array.from({ length: 64 }, (_, i) => stream(i)));
    assert.deepEqual(burst.filter(Boolean), [], 'every stream of the burst answered');
    for (let i = 0; i < 20; i++) {
      const r = await postJson(`${ws.url}/v1/chat/completions`, chat('You are brief.', `Question ${i}?`, { max_tokens: 4 }));
      assert.equal(r.status, 200, `request ${i} after the burst: ${JSON.stringify(r.body)}`);
    }
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
