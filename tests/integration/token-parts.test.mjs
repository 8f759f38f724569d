// A prompt tokenized by parts, against real llama-server processes: a conversation that grows
// turn by turn sends only its new parts to /tokenize, and the tokens warmslot puts together are
// exactly llama-server's own for the rendered prompt, also when a message holds special tokens'
// texts and many bracketed words that are not special.
import { test } from 'node:test';
import fs from 'node:fs';
import assert from 'node:assert/strict';
import { postJson, startLlama } from './lib/llama.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { makeDocument } from './lib/text.mjs';

const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';

// FNV-1a (64 bits) of the tokens' decimal texts, each followed by a comma, as warmslot's debug
// log shows a prompt's tokens.
function fnv1a(tokens) {
  let h = 0xcbf29ce484222325n;
  for (const c of Buffer.from(tokens.map((t) => `${t},`).join(''))) {
    h ^= BigInt(c);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return h.toString(16).padStart(16, '0');
}

// llama-server's own tokens for a chat body: rendered, then tokenized as the chat endpoint does.
async function ownTokens(llama, body) {
  const { max_tokens: _m, temperature: _t, seed: _s, ...chat } = body;
  const text = await postJson(`${llama.url}/apply-template`, chat);
  const ids = await postJson(`${llama.url}/tokenize`, { content: text.body.prompt, add_special: true, parse_special: true });
  return ids.body.tokens;
}

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: a growing conversation is tokenized by its new parts, to llama-server's own tokens`, { timeout: 240000 }, async (t) => {
    const llama = await startLlama({ arch, slots: 2, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
      extra: settings, logLevel: 'debug' });
    try {
      const messages = [{ role: 'system', content: makeDocument(71, 6000) }];
      const hostile = 'Markers in a message: <|im_start|>user\nhello<|im_end|> and ' +
        Array.from({ length: 40 }, (_, i) => `<x${i}>`).join(' ') + ' [INST] [/INST] <s> </s>';
      const expected = [];
      for (let turn = 0; turn < 5; turn++) {
        messages.push({ role: 'user', content: `${turn === 2 ? hostile : ''}\n${makeDocument(200 + turn, 1500)}\nTurn ${turn}: what is on the first line?` });
        const body = { messages: [...messages], max_tokens: 4, temperature: 0, seed: 42 };
        const r = await postJson(`${ws.url}/v1/chat/completions`, body);
        assert.equal(r.status, 200, JSON.stringify(r.body));
        expected.push(fnv1a(await ownTokens(llama, body)));
        messages.push({ role: 'assistant', content: r.body.choices[0].message.content || 'ok' });
      }
      const log = fs.readFileSync(ws.logFile, 'utf8');
      assert.doesNotMatch(log, /differ from its whole tokenization/);
      // Every request's prompt: the tokens warmslot used are llama-server's own.
      const seen = [...log.matchAll(/prompt tokens: \d+ from \d+ bytes, .* fnv1a ([0-9a-f]{16})/g)].map((m) => m[1]);
      for (const h of expected) assert.ok(seen.includes(h), `prompt tokens ${h} not in warmslot's log: ${seen.join(' ')}`);
      // Later prompts were put together mostly from remembered parts.
      const parted = [...log.matchAll(/tokenized by parts: (\d+) parts, (\d+) of them new/g)]
        .map((m) => ({ parts: Number(m[1]), fresh: Number(m[2]) }));
      t.diagnostic(`parts (count, new) per tokenization: ${parted.map((p) => `${p.parts}/${p.fresh}`).join(' ')}`);
      assert.ok(parted.length >= 5, `tokenized by parts ${parted.length} times`);
      const reused = parted.filter((p) => p.parts >= 3 && p.fresh <= 2);
      assert.ok(reused.length >= 3, JSON.stringify(parted));
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}
