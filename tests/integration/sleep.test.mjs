// llama-server --sleep-idle-seconds behind warmslot, on real processes: warmslot's checks do not
// keep the server awake, the document a slot holds is saved before the server sleeps (it was
// used once, below snapshot_after_uses), and a question asked as soon as the server sleeps is
// answered from the document's file: it costs the question, where llama-server alone computes
// the whole document again after a sleep.
import { test } from 'node:test';
import fs from 'node:fs';
import assert from 'node:assert/strict';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const sleepSeconds = 3;
const settings = 'routing:\n  reconcile_interval: 1s\ncache:\n  min_prefix_tokens: 1024\n' +
  '  snapshot_after_uses: 2\n';

// Until llama-server says it sleeps: /props answers during sleep without waking it.
async function asleep(llama) {
  await waitFor('llama-server to fall asleep', async () =>
    (await getJson(`${llama.url}/props`)).body.is_sleeping === true, 30000, 100);
}

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: a server that sleeps falls asleep behind warmslot, and its document is restored when it wakes`, { timeout: 240000 }, async () => {
    const llama = await startLlama({ arch, slots: 2, ctx: 16384,
      extra: ['--sleep-idle-seconds', String(sleepSeconds)] });
    const ws = await startWarmslot({
      backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir, lines: [`sleep_idle: ${sleepSeconds}s`] }],
      extra: settings });
    try {
      await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
      const doc = makeDocument(8101, 6000);
      const first = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'What comes first?'));
      assert.equal(first.status, 200, JSON.stringify(first.body));
      assert.equal(first.headers.get('x-warmslot-disk') ?? '', '', 'used once: no file yet');
      assert.ok(first.body.timings.prompt_n > 5000);

      // warmslot's checks go on (every second) and the server still falls asleep; before it
      // does, warmslot saves the document the slot holds.
      const t0 = Date.now();
      await asleep(llama);
      const slept = (Date.now() - t0) / 1000;
      assert.ok(slept < 4 * sleepSeconds, `asleep after ${slept} s`);
      const log = () => fs.readFileSync(ws.logFile, 'utf8');
      assert.match(log(), /saved 1 slot prefixes to disk/);

      // Asked at once: the request wakes the server and restores the document.
      const second = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'What comes last?'));
      assert.equal(second.status, 200, JSON.stringify(second.body));
      assert.match(second.headers.get('x-warmslot-disk') ?? '', /^restored \d+ tokens/);
      assert.ok(second.body.timings.prompt_n <= 128, `the question and its turn only: ${second.body.timings.prompt_n}`);

      // llama-server alone after it sleeps: the whole document again.
      await asleep(llama);
      const alone = await postJson(`${llama.url}/v1/chat/completions`, chat(doc, 'Which line is longest?'));
      assert.equal(alone.status, 200);
      assert.ok(alone.body.timings.prompt_n > 5000, `alone: ${alone.body.timings.prompt_n}`);
      assert.match(log(), /backend b sleeps \(llama-server --sleep-idle-seconds\)/);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}
