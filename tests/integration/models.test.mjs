// The generated test models: deterministic, byte-level vocabulary, ChatML, long context.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { getJson, modelPath, postJson, startLlama } from './lib/llama.mjs';
import { runScript, tempDir } from './lib/procs.mjs';

const samples = [
  'plain ASCII, with punctuation: {"a": [1, 2]}\n\ttabs and newlines\n',
  '日本語の文書をキャッシュする。句読点、かな、カナ、漢字。',
  'mixed: café naïve Ωμέγα 😀 𝄞 \u0000 and a final space ',
];

const sha = (file) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');

test('the generator is deterministic: same arch, preset and seed give the same bytes', () => {
  const dir = tempDir('models');
  try {
    for (const arch of ['llama', 'qwen35']) {
      const cached = modelPath(arch);
      const fresh = runScript('tests/models/models.sh', [arch, 'tiny', '1'], { WARMSLOT_MODELS_DIR: dir });
      assert.notEqual(fresh, cached);
      assert.equal(sha(fresh), sha(cached), `${arch} differs between two generations`);
      const other = runScript('tests/models/models.sh', [arch, 'tiny', '2'], { WARMSLOT_MODELS_DIR: dir });
      assert.notEqual(sha(other), sha(cached), `${arch}: another seed must give other weights`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

for (const arch of ['llama', 'qwen35', 'gemma2']) {
  test(`${arch}: vocabulary, template and context`, { timeout: 120000 }, async () => {
    const server = await startLlama({ arch, slots: 1, ctx: 4096 });
    try {
      for (const text of samples) {
        const tok = await postJson(`${server.url}/tokenize`, { content: text });
        assert.equal(tok.body.tokens.length, Buffer.byteLength(text), 'one token per byte');
        const detok = await postJson(`${server.url}/detokenize`, { tokens: tok.body.tokens });
        assert.equal(detok.body.content, text, 'exact round trip');
      }
      const special = await postJson(`${server.url}/tokenize`,
        { content: '<|im_start|>user\nhi<|im_end|>', parse_special: true, with_pieces: false });
      assert.equal(special.body.tokens.length, 1 + Buffer.byteLength('user\nhi') + 1, 'control tokens are single tokens');
      const rendered = await postJson(`${server.url}/apply-template`,
        { messages: [{ role: 'system', content: 'S' }, { role: 'user', content: [{ type: 'text', text: 'Q' }] }] });
      assert.equal(rendered.body.prompt,
        '<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n');
      const models = await getJson(`${server.url}/v1/models`);
      assert.ok(models.body.data[0].meta.n_ctx_train >= 131072, 'context length at least 131072');
    } finally {
      await server.stop();
    }
  });
}
