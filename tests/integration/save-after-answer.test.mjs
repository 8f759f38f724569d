// A streamed request on a new document gets its first token as soon as it would straight from
// llama-server: on a full-attention model warmslot saves the document's file after the answer
// (the file holds the prompt and the answer; its row covers the document's prefix), and a
// restore of that file after a restart serves the next question. A hybrid model still gets
// a file that ends exactly at the prefix, primed and saved before the request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { assertOnlyQuestionComputed, getJson, restartLlama, snapshotFiles, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { readSse, startWarmslot } from './lib/warmslot.mjs';
import { askChat, diskSettings } from './lib/ask.mjs';
import { chat, makeDocument } from './lib/text.mjs';

async function routed(ws) {
  await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
}

// One streamed chat request: its headers, and the timings of its last event.
const askStreamed = (ws, doc, question) => streamTurn(ws, 'chat', doc, [['user', question]]);

function indexRows(dir) {
  const out = execFileSync('sqlite3', ['-separator', ' ', path.join(dir, 'warmslot-index.sqlite'),
    'SELECT file, tokens FROM snapshots ORDER BY file;'], { encoding: 'utf8' });
  return out.trim().split('\n').filter(Boolean).map((l) => {
    const [file, tokens] = l.split(' ');
    return { file, tokens: Number(tokens) };
  });
}

test('llama: a streamed request on a new document is not primed first; its file is saved after the answer and restores after a restart', { timeout: 300000 }, async () => {
  let llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: diskSettings });
  try {
    await routed(ws);
    const doc = makeDocument(510, 7000);
    const first = await askStreamed(ws, doc, 'What is on the first line?');
    const m = first.disk.match(/^snapshot (\d+) tokens after the answer$/);
    assert.ok(m, `disk header: ${first.disk}`);
    const prefix = Number(m[1]);
    assert.equal(first.primed, null, 'nothing primed before the request');
    // llama-server computed the whole prompt for the request itself, as it would alone.
    assert.ok(first.timings, 'the last event carries timings');
    assert.ok(first.timings.prompt_n > prefix, `computed ${first.timings.prompt_n}, prefix ${prefix}`);

    await waitFor('the file saved after the answer', () => snapshotFiles(llama.saveDir).length === 1, 30000);
    await waitFor('its row', () => indexRows(llama.saveDir).length === 1, 10000);
    const [row] = indexRows(llama.saveDir);
    assert.equal(row.tokens, prefix, 'the row covers the prefix');
    const log = await waitFor('the access line', () => {
      const text = fs.readFileSync(ws.logFile, 'utf8');
      return /snapshot \d+ tokens saved after the answer/.test(text) && text;
    }, 10000);
    assert.match(log, new RegExp(`snapshot ${prefix} tokens saved after the answer`));

    // The next question on the same slot reuses the slot as it is.
    const second = await askChat(ws, doc, 'And the second line?');
    await assertOnlyQuestionComputed(second, llama.url, 'And the second line?', 'second: ');

    llama = await restartLlama(llama);
    await waitFor('warmslot to notice the restart', async () => {
      const text = await (await fetch(`${ws.url}/metrics`)).text();
      return /warmslot_belief_corrections_total [1-9]/.test(text);
    }, 10000);
    const q = 'And what is on the last line?';
    const after = await askChat(ws, doc, q);
    assert.equal(after.disk, `restored ${prefix} tokens`);
    await assertOnlyQuestionComputed(after, llama.url, q, 'after the restart: ');
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('qwen35: a streamed request on a new document still gets a file that ends at the prefix, saved before the request', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'qwen35', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: diskSettings });
  try {
    await routed(ws);
    const doc = makeDocument(511, 7000);
    const first = await askStreamed(ws, doc, 'What is on the first line?');
    const m = first.disk.match(/^snapshot (\d+) tokens$/);
    assert.ok(m, `disk header: ${first.disk}`);
    assert.ok(Number(first.primed) > 0, 'primed before the request');
    assert.equal(snapshotFiles(llama.saveDir).length, 1, 'on disk before the answer');
    assert.deepEqual(indexRows(llama.saveDir).map((r) => r.tokens), [Number(m[1])]);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

// One streamed request over Chat Completions or Messages; its headers and prompt counts.
async function streamTurn(ws, api, system, turns) {
  const messages = turns.map(([role, content]) => ({ role, content }));
  const chatApi = api === 'chat';
  const body = chatApi
    ? { messages: [{ role: 'system', content: system }, ...messages], max_tokens: 4, temperature: 0, seed: 42, stream: true }
    : { model: 'test', system, messages, max_tokens: 4, temperature: 0, stream: true };
  const res = await fetch(`${ws.url}/v1/${chatApi ? 'chat/completions' : 'messages'}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(res.status, 200);
  let timings = null;
  await readSse(res, (data) => {
    if (data === '[DONE]') return;
    const e = JSON.parse(data);
    if (e.timings) timings = e.timings;
    // Messages: usage in message_start (under `message`) and message_delta; the last one counts.
    const usage = e.usage ?? e.message?.usage;
    if (!chatApi && usage?.input_tokens !== undefined) {
      timings = { prompt_n: usage.input_tokens, cache_n: usage.cache_read_input_tokens ?? 0 };
    }
  });
  return { disk: res.headers.get('x-warmslot-disk') ?? '', primed: res.headers.get('x-warmslot-primed-tokens'), timings };
}

// An agent that keeps the bulk of its prompt in its final user message (environment, project
// files) leaves no stable messages worth a file. Its whole prompt is saved after the answer, so
// its next turn after a restart restores it rather than computing it again; on the slot
// llama-server was expected to choose for a Messages request too.
test('llama: a conversation\'s own file, saved after the answer, brings its whole prompt back after a restart (Chat Completions and Messages)', { timeout: 300000 }, async () => {
  let llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: diskSettings });
  try {
    await routed(ws);
    const saved = {};
    // A Messages request goes where llama-server's similarity rule puts it: warmslot prepares a
    // slot for it only when its system prompt is a fair share of it (saved before it here).
    const systems = { chat: 'You are terse.', messages: makeDocument(522, 1500) };
    for (const api of ['chat', 'messages']) {
      const context = makeDocument(api === 'chat' ? 520 : 521, 4000);
      const first = await streamTurn(ws, api, systems[api], [['user', `${context}\nWhat is on the first line?`]]);
      const m = first.disk.match(/^(?:snapshot \d+ tokens, then )?(?:snapshot )?(\d+) tokens after the answer$/);
      assert.ok(m, `${api}: disk header: ${first.disk}`);
      saved[api] = { context, tokens: Number(m[1]) };
      await waitFor(`${api}: its row`, () => indexRows(llama.saveDir).some((r) => r.tokens === saved[api].tokens), 30000);
    }
    llama = await restartLlama(llama);
    await waitFor('warmslot to notice the restart', async () => {
      const text = await (await fetch(`${ws.url}/metrics`)).text();
      return /warmslot_belief_corrections_total [1-9]/.test(text);
    }, 10000);
    for (const api of ['chat', 'messages']) {
      const { context, tokens } = saved[api];
      const next = await streamTurn(ws, api, systems[api], [
        ['user', `${context}\nWhat is on the first line?`], ['assistant', 'The first line.'],
        ['user', 'And the second?']]);
      assert.match(next.disk, new RegExp(`^restored ${tokens} tokens`), `${api}: disk header`);
      assert.ok(next.timings, `${api}: the answer's prompt counts`);
      // The previous prompt came from the file: only the last block of it, the answer and the
      // new question are computed.
      assert.ok(next.timings.prompt_n <= 64, `${api}: computed ${next.timings.prompt_n} after restoring ${tokens}`);
    }
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
