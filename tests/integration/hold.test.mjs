// A request that finds every slot busy waits in warmslot, not in llama-server's queue: there it
// would take the first slot to free up the moment the answer running there ends, before the
// conversation that slot holds is saved. Held here, it is planned on the slot once that
// conversation's file is written (or on its own prefix, should that slot free up first).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { getJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { readSse, startWarmslot } from './lib/warmslot.mjs';
import { diskSettings } from './lib/ask.mjs';
import { makeDocument } from './lib/text.mjs';

async function turn(ws, messages, maxTokens = 4) {
  const res = await fetch(`${ws.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'system', content: 'You are terse.' }, ...messages.map(([role, content]) => ({ role, content }))],
      max_tokens: maxTokens, temperature: 0, seed: 42, stream: true }),
  });
  assert.equal(res.status, 200);
  let timings = null;
  await readSse(res, (data) => {
    if (data !== '[DONE]' && JSON.parse(data).timings) timings = JSON.parse(data).timings;
  });
  return { disk: res.headers.get('x-warmslot-disk') ?? '', route: res.headers.get('x-warmslot-route'), timings };
}

const rows = (dir) => execFileSync('sqlite3', [path.join(dir, 'warmslot-index.sqlite'),
  'SELECT tokens FROM snapshots;'], { encoding: 'utf8' }).trim().split('\n').filter(Boolean).map(Number);

test('llama: with both slots busy a third conversation waits in warmslot, and both answers that were running are saved before it takes a slot', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: diskSettings });
  try {
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const context = { a: makeDocument(530, 3000), b: makeDocument(531, 3000), c: makeDocument(532, 3000) };
    for (const k of ['a', 'b']) await turn(ws, [['user', `${context[k]}\nFirst?`]]);
    // The second turns of A and B grow their conversations and answer at length: both slots busy.
    const second = (k, seed) => [['user', `${context[k]}\nFirst?`], ['assistant', 'The first line.'],
      ['user', `${makeDocument(seed, 1500)}\nTell it all.`]];
    const runs = [turn(ws, second('a', 533), 400), turn(ws, second('b', 534), 400)];
    await waitFor('both slots busy', async () =>
      (await getJson(`${llama.url}/slots`)).body.filter((s) => s.is_processing).length === 2, 30000);
    const third = await turn(ws, [['user', `${context.c}\nFirst?`]]);
    const [a, b] = await Promise.all(runs);
    assert.match(third.route, /; waited_ms=\d+$/, 'the third conversation waited for a slot');
    const due = [a, b].map((r) => {
      const m = r.disk.match(/(\d+) tokens after the answer$/);
      assert.ok(m, `a second turn's file is due after its answer: ${r.disk}`);
      return Number(m[1]);
    });
    // Both were saved: the slot the third conversation took was saved before it went there.
    try {
      await waitFor('both files indexed', () => due.every((n) => rows(llama.saveDir).includes(n)), 20000);
    } catch (e) {
      const log = fs.readFileSync(ws.logFile, 'utf8').split('\n').filter((l) => l.includes('after the answer'));
      throw new Error(`${e.message}: due ${due}, indexed ${rows(llama.saveDir)}\n${log.join('\n')}`);
    }
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
