// Answers as evidence: the generated models' greedy answer depends on the prompt, so a request
// answered through a cache must give the same text as llama-server computing it from scratch.
import assert from 'node:assert/strict';
import { postJson, startLlama } from './llama.mjs';

export const answerTokens = 16;

// A chat request whose answer is compared: temperature 0, a fixed seed, `answerTokens` tokens.
export function answerBody(system, question, extra = {}) {
  return {
    messages: [{ role: 'system', content: system }, { role: 'user', content: question }],
    max_tokens: answerTokens, temperature: 0, seed: 42, ...extra,
  };
}

// The document with its last line replaced (the smallest change that must change the answer).
export function withLastLine(doc, line) {
  return doc.slice(0, doc.lastIndexOf('\n') + 1) + line;
}

// Posts a chat request and returns its answer text with what the cache did.
export async function ask(url, body, headers = {}, path = '/v1/chat/completions') {
  const r = await postJson(`${url}${path}`, body, headers);
  assert.equal(r.status, 200, `${path}: ${JSON.stringify(r.body).slice(0, 300)}`);
  return {
    text: r.body.choices[0].message.content,
    processed: r.body.timings.prompt_n,
    cached: r.body.timings.cache_n,
    route: r.headers.get('x-warmslot-route') ?? '',
    disk: r.headers.get('x-warmslot-disk') ?? '',
  };
}

// Empties every slot of a llama-server (its RAM prompt cache is off with explicit -np).
export async function eraseSlots(url, slots) {
  for (let id = 0; id < slots; id++) {
    const r = await postJson(`${url}/slots/${id}?action=erase`, {});
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
}

// The answer llama-server gives to `body` computed from scratch: every slot erased first.
export async function referenceAnswer(llama, body) {
  await eraseSlots(llama.url, llama.slots);
  const a = await ask(llama.url, body);
  assert.equal(a.cached, 0, 'a reference answer reuses nothing');
  return a.text;
}

// The answer to `body` from a llama-server of its own, started like `like` (same model file,
// slots, context and flags) with its RAM prompt cache off and stopped afterwards: no state of the
// server under test (nor its host-RAM prompt cache, which an erase does not empty) can reach it.
export async function freshAnswer(like, body) {
  const ref = await startLlama({ arch: like.arch, model: like.model, slots: like.slots, ctx: like.ctx,
    extra: [...like.extra, '--cache-ram', '0'] });
  try {
    return await referenceAnswer(ref, body);
  } finally {
    await ref.stop();
  }
}

// Asserts that `got` (an ask() result) answered `want`, naming the case, route and disk action.
export function assertSameAnswer(got, want, what) {
  assert.equal(got.text, want,
    `${what}: answer ${JSON.stringify(got.text)} differs from the from-scratch ${JSON.stringify(want)} ` +
    `(route ${got.route || '-'}, disk ${got.disk || '-'}, processed ${got.processed}, cached ${got.cached})`);
}

// Leaves slot `id` holding exactly the tokens of `body`'s prompt up to its last user turn (the
// prefix a hybrid model can extend after a restore), as token ids.
export async function primeExactPrefix(url, body, id = 0) {
  const full = (await postJson(`${url}/apply-template`, body)).body.prompt;
  const cut = full.lastIndexOf('<|im_start|>user\n') + '<|im_start|>user\n'.length;
  const tok = await postJson(`${url}/tokenize`,
    { content: full.slice(0, cut), add_special: true, parse_special: true });
  const r = await postJson(`${url}/completion`,
    { prompt: tok.body.tokens, n_predict: 0, id_slot: id, cache_prompt: true });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return tok.body.tokens.length;
}
