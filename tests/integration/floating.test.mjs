// Anthropic Messages requests cannot be pinned: llama-server rebuilds the body from the fields it
// knows and drops id_slot, so its own choice (get_available_slot: the idle slot sharing the most
// of the prompt, else the least recently used one) decides where they run. warmslot prepares the
// slot that choice will take, says which in X-Warmslot-Expected-Slot, and GET /slots shows where
// each request really ran: every request asks for its own number of tokens, and the slot whose
// last task has that n_predict ran it.
//
// The hybrid model without context checkpoints is the hard case: a slot holding the document and
// an earlier question cannot roll back to the document, yet it shares more of the next question's
// prompt than a slot holding exactly the document, so llama-server prefers it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { getJson, postJson, promptStats, questionTokens, startLlama } from './lib/llama.mjs';
import { startRelay } from './lib/relay.mjs';
import { sleep, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { makeDocument } from './lib/text.mjs';

const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';

async function promptTokensTotal(llama) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)?.[1] ?? NaN);
}

// The slot whose last task asked for `n` tokens (-1: none, or several).
async function ranOn(llama, n) {
  const { body } = await getJson(`${llama.url}/slots`);
  const found = body.filter((s) => s.params?.n_predict === n);
  return found.length === 1 ? found[0].id : -1;
}

test('qwen35 -np 2 without checkpoints: Messages requests run on the slot warmslot prepared', { timeout: 400000 }, async () => {
  const llama = await startLlama({ arch: 'qwen35', slots: 2, ctx: 16384, extra: ['--ctx-checkpoints', '0'] });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
  try {
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const doc = makeDocument(2701, 6000);
    let asked = 2;  // warmslot primes with n_predict 1: every request here asks for more
    const ask = async (question, long) => {
      const n = long ?? ++asked;
      const r = await postJson(`${ws.url}/v1/messages`, { model: 'tiny', max_tokens: n, temperature: 0,
        system: [{ type: 'text', text: doc }], messages: [{ role: 'user', content: question }] });
      assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
      const expected = r.headers.get('x-warmslot-expected-slot');
      assert.ok(expected !== null, `no X-Warmslot-Expected-Slot for "${question}"`);
      return { question, n, expected: Number(expected), disk: r.headers.get('x-warmslot-disk') ?? '' };
    };
    const where = async (a) => ({ ...a, ran: await ranOn(llama, a.n) });

    // Two questions on the document at once: each has its own slot prepared with the document,
    // and llama-server would give the one sent first the lower of the two (the same common
    // prefix, ties to the lower id) while the other is still idle there. warmslot sends the one
    // prepared on the higher slot only once the other runs on the lower one, so each runs where
    // it was prepared.
    const both = await Promise.all([ask('Question one: what is on the first line?', 400),
      ask('Question two: which word comes last?', 401)]);
    const placed = await Promise.all(both.map(where));
    const slots = (await getJson(`${llama.url}/slots`)).body.map((s) => `${s.id}: n_predict ${s.params?.n_predict}`).join(', ');
    for (const a of placed) {
      assert.equal(a.ran, a.expected, `"${a.question}" (asked at once with another) ran on slot ${a.ran}, prepared on ${a.expected} (${a.disk}); both: ${JSON.stringify(placed)}; /slots: ${slots}`);
    }
    // Three more one after another. The first finds a slot holding the document and an earlier
    // question: warmslot keeps it for llama-server's rollback (it has not seen one fail here), and
    // without a checkpoint the whole prompt is recomputed, which teaches warmslot that restoring
    // the document's file is cheaper. From then on each computes its question only.
    const later = ['Question three: how many lines are there?', 'Question four: name a river.',
      'Question five: is there a lantern?'];
    for (const [i, q] of later.entries()) {
      const before = await promptTokensTotal(llama);
      const a = await where(await ask(q));
      const computed = (await promptTokensTotal(llama)) - before;
      assert.equal(a.ran, a.expected, `"${q}" ran on slot ${a.ran}, prepared on ${a.expected} (${a.disk})`);
      const bound = (await questionTokens(llama.url, q)) + 64;
      if (i === 0) continue;
      assert.ok(computed <= bound, `"${q}": llama-server computed ${computed} tokens, bound ${bound} (${a.disk})`);
    }
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

// A slot that would take a floating request from the slot prepared for it is erased first. It is
// reserved and marked meanwhile: a request warmslot plans in that moment does not go there (and
// then lose its prefix to the erase), and one llama-server places itself (here `n: 2`, never
// pinned) is not sent until the erase is done, since llama-server could put it on the slot being
// erased or on the one prepared for the floating request. A relay holds the erase to make that
// moment long.
test('llama -np 2: requests sent while a rival slot is erased wait for it, and keep their prefix', { timeout: 300000 }, async (t) => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const relay = await startRelay(() => llama.url);
  let ws;
  try {
    ws = await startWarmslot({ backends: [{ name: 'b', url: relay.url, slotSaveDir: llama.saveDir }], extra: settings });
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const doc = makeDocument(2702, 6000);
    const messages = (question, n) => postJson(`${ws.url}/v1/messages`, { model: 'tiny', max_tokens: n,
      temperature: 0, system: [{ type: 'text', text: doc }], messages: [{ role: 'user', content: question }] });
    const chatBody = (question) => ({ messages: [{ role: 'system', content: doc }, { role: 'user', content: question }],
      max_tokens: 4, temperature: 0 });
    // Both slots hold the document and a question of their own: the answers are long enough
    // that the first still runs when the second is planned, also on a loaded machine.
    const both = await Promise.all([messages('Question one: what is on the first line?', 400),
      messages('Question two: which word comes last?', 401)]);
    for (const r of both) assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
    const prepared = both.map((r) => r.headers.get('x-warmslot-expected-slot'));
    assert.notEqual(prepared[0], prepared[1], `both questions were prepared on slot ${prepared[0]}: no rival to erase`);
    // The next floating question finds a rival: the erase is held on its way to llama-server.
    relay.holdOnly = /[?&]action=erase/;
    const floating = messages('Question three: how many lines are there?', 42);
    await waitFor('a rival erased', () => relay.heldPaths.some((p) => /action=erase/.test(p)), 60000);
    const erased = Number(relay.heldPaths.find((p) => /action=erase/.test(p)).match(/\/slots\/(\d+)/)[1]);
    const arrived = relay.arrivals.length;
    const q4 = 'Question four: name a river.';
    const chat = postJson(`${ws.url}/v1/chat/completions`, chatBody(q4));
    const placed = postJson(`${ws.url}/v1/chat/completions`, { ...chatBody('Question five: two answers?'), n: 2 });
    await Promise.race([Promise.all([chat, placed]), sleep(4000)]);
    const duringErase = relay.arrivals.slice(arrived).filter((p) => !/^GET /.test(p));
    await relay.release();
    const [f, c, p] = await Promise.all([floating, chat, placed]);
    for (const r of [f, c, p]) assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
    assert.deepEqual(duringErase, [], `sent to llama-server while slot ${erased} was being erased: ${JSON.stringify(duringErase)}`);
    const route = c.headers.get('x-warmslot-route');
    assert.ok(c.headers.get('x-warmslot-slot') !== null, `the chat question was pinned (${route})`);
    const ranOnSlot = Number(c.headers.get('x-warmslot-slot'));
    // Ask llama-server itself whether the slot the chat question ran on still holds its prompt
    // (the request with n: 2 may have run on either slot since: it is asked for first).
    const again = await postJson(`${llama.url}/v1/chat/completions`, { ...chatBody(q4), id_slot: ranOnSlot });
    assert.equal(again.status, 200, JSON.stringify(again.body).slice(0, 300));
    const s = promptStats(again.body);
    t.diagnostic(`slot ${erased} erased; the chat question: ${route}, slot ${ranOnSlot}; asked again there: ` +
      `${s.processed} of ${s.total} tokens computed`);
    assert.ok(s.cached >= s.total - 1000, `the chat question's slot ${ranOnSlot} (${route}) lost the document: ` +
      `asked again there it computed ${s.processed} of ${s.total} tokens`);
  } finally {
    if (ws) await ws.stop();
    await relay.stop();
    await llama.stop();
  }
});
