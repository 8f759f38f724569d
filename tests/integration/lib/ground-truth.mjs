// The llama-server behaviours warmslot relies on, measured through a real server.
// Used by tests/integration/ground-truth.test.mjs (asserts) and
// tests/tools/behaviour-doc.mjs (writes docs/llama-server-behaviour.md).
import { postJson, getJson, promptStats, startLlama } from './llama.mjs';
import { chat, insertLineInMiddle, makeDocument } from './text.mjs';

export const hybridArchs = new Set(['qwen35']);

async function ask(server, body) {
  const r = await postJson(`${server.url}/v1/chat/completions`, { id_slot: 0, ...body });
  if (r.status !== 200) throw new Error(`chat failed ${r.status}: ${JSON.stringify(r.body)}`);
  return promptStats(r.body);
}

async function tokens(server, text) {
  const r = await postJson(`${server.url}/tokenize`, { content: text, add_special: true, parse_special: true });
  return r.body.tokens;
}

async function render(server, messages, addGenerationPrompt = true) {
  const r = await postJson(`${server.url}/apply-template`, { messages, add_generation_prompt: addGenerationPrompt });
  return r.body.prompt;
}

async function slotAction(server, id, action, filename) {
  return postJson(`${server.url}/slots/${id}?action=${action}`, filename ? { filename } : {});
}

// Makes slot 0 hold exactly the token prefix of `system` (template up to the user turn).
async function primeExactPrefix(server, system) {
  const prefixText = await render(server, [{ role: 'system', content: system }], false);
  const p = await tokens(server, prefixText);
  const r = await postJson(`${server.url}/completion`,
    { prompt: p, n_predict: 1, id_slot: 0, cache_prompt: true, temperature: 0 });
  if (r.status !== 200) throw new Error(`priming failed: ${JSON.stringify(r.body)}`);
  return p.length;
}

// Each row: what was done, tokens processed, the prompt size, the bound, and whether it held.
// `pin`: the llama.cpp version (tests/llama/pins), the first one by default.
export async function measure(arch, { log = () => {}, pin } = {}) {
  const hybrid = hybridArchs.has(arch);
  const doc = makeDocument(7, 7000);
  const other = makeDocument(8, 7000);
  const q1 = 'What does the document say about the harbour?';
  const q2 = 'Summarise the third paragraph in one line.';
  const rows = [];
  const row = (step, stats, limit, holds) => {
    rows.push({ arch, pin, step, processed: stats.processed, total: stats.total, limit, ok: holds });
    log(`${arch}: ${step}: processed ${stats.processed} of ${stats.total} (${limit})`);
  };
  const server = await startLlama({ arch, pin, slots: 2, extra: ['--cache-ram', '0'] });
  try {
    const first = await ask(server, chat(doc, q1));
    row('first request', first, 'all', first.processed === first.total);
    const again = await ask(server, chat(doc, q1));
    const againMax = hybrid ? 8 : 2;
    row('same request again', again, `<= ${againMax}`, again.processed <= againMax);

    const tail = (await tokens(server, `<|im_start|>user\n${q2}<|im_end|>\n<|im_start|>assistant\n`)).length;
    const other_q = await ask(server, chat(doc, q2));
    const otherMax = hybrid ? 600 : tail;
    row('same document, other question', other_q, `<= ${otherMax}`, other_q.processed <= otherMax);

    const edited = insertLineInMiddle(doc, 'An inserted line about the lantern and the quarry.');
    const editPrefix = (await tokens(server, `<|im_start|>system\n${doc.slice(0, edited.offset)}`)).length;
    await ask(server, chat(doc, q1));
    const edit = await ask(server, chat(edited.text, q1));
    const fromEdit = edit.total - editPrefix;
    if (hybrid) row('one line inserted mid-document', edit, 'all', edit.processed >= edit.total - 1);
    else row('one line inserted mid-document', edit, `~${fromEdit} (from the edit)`,
      Math.abs(edit.processed - fromEdit) <= 2);

    await ask(server, chat(doc, q1));
    const saved = await slotAction(server, 0, 'save', `gt-${arch}-full.bin`);
    await ask(server, chat(other, q1));
    await slotAction(server, 0, 'restore', `gt-${arch}-full.bin`);
    const restored = await ask(server, chat(doc, q1));
    if (saved.status !== 200) throw new Error(`save failed: ${JSON.stringify(saved.body)}`);
    if (hybrid) row('save, other document, restore, same request', restored, 'all (restore useless)',
      restored.processed >= restored.total - 1);
    else row('save, other document, restore, same request', restored, '<= 2', restored.processed <= 2);

    const qTail = (await tokens(server, `<|im_start|>user\n${q1}<|im_end|>\n<|im_start|>assistant\n`)).length;
    await primeExactPrefix(server, doc);
    await slotAction(server, 0, 'save', `gt-${arch}-prefix.bin`);
    await ask(server, chat(other, q2));
    await slotAction(server, 0, 'restore', `gt-${arch}-prefix.bin`);
    const exact = await ask(server, chat(doc, q1));
    row('exact prefix P saved, overwritten, restored, then P + question', exact, `<= ${qTail + 16}`,
      exact.processed <= qTail + 16);

    const other_np = await startLlama({ arch, pin, slots: 3, slotSaveDir: server.saveDir, extra: ['--cache-ram', '0'] });
    try {
      const bad = await slotAction(other_np, 0, 'restore', `gt-${arch}-prefix.bin`);
      const slots = (await getJson(`${other_np.url}/slots`)).body;
      const held = slots[0].n_prompt_tokens ?? 0;
      const after = await ask(other_np, chat(doc, q1));
      rows.push({ arch, pin, step: 'restore into a server with another -np', processed: after.processed,
        total: after.total, limit: 'HTTP 400, slot left empty',
        ok: bad.status === 400 && held === 0 && after.cached === 0 });
      log(`${arch}: restore with other -np: HTTP ${bad.status}, slot holds ${held}, then cached ${after.cached}`);
    } finally {
      await other_np.stop();
    }
  } finally {
    await server.stop();
  }
  return rows;
}
