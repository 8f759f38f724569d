// What the disk tier reports and keeps, against real llama-server processes: the prompt tokens it
// reports for a request include warmslot's own priming (matching llama-server's /metrics), and a
// restore that times out keeps its file. A small HTTP relay between warmslot and llama-server
// holds restore calls on demand: a real llama-server cannot be made slow at will.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { getJson, postJson, questionTokens, restartLlama, snapshotFiles, startLlama } from './lib/llama.mjs';
import { sleep, waitFor } from './lib/procs.mjs';
import { startRelay } from './lib/relay.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';

async function llamaMetric(llama, name) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(new RegExp(`^llamacpp:${name} (\\d+)`, 'm'))?.[1] ?? NaN);
}

async function warmslotMetric(ws, name) {
  const text = await (await fetch(`${ws.url}/metrics`)).text();
  return Number(text.match(new RegExp(`^${name} (\\d+)`, 'm'))?.[1] ?? NaN);
}

// One question about `doc` through warmslot: what it reported and what llama-server computed.
async function askAbout(llama, ws, doc, q) {
  const before = await llamaMetric(llama, 'prompt_tokens_total');
  const r = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, q));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { processed: Number(r.headers.get('x-warmslot-processed-tokens')), slot: r.headers.get('x-warmslot-slot'),
    computed: (await llamaMetric(llama, 'prompt_tokens_total')) - before, disk: r.headers.get('x-warmslot-disk') ?? '' };
}

async function routed(ws) {
  await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
}

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: a first long-prefix request reports the priming in its processed tokens`, { timeout: 300000 }, async () => {
    const llama = await startLlama({ arch, slots: 2, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    try {
      await routed(ws);
      const before = await llamaMetric(llama, 'prompt_tokens_total');
      const primedBefore = await warmslotMetric(ws, 'warmslot_prompt_tokens_primed_total');
      const r = await postJson(`${ws.url}/v1/chat/completions`, chat(makeDocument(700, 8000), 'What is on the first line?'));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const computed = (await llamaMetric(llama, 'prompt_tokens_total')) - before;
      assert.match(r.headers.get('x-warmslot-disk') ?? '', /^snapshot \d+ tokens/);
      const primed = Number(r.headers.get('x-warmslot-primed-tokens'));
      const processed = Number(r.headers.get('x-warmslot-processed-tokens'));
      assert.ok(primed > 7000, `the priming computed the document (${primed})`);
      assert.equal(processed, computed, 'X-Warmslot-Processed-Tokens is what llama-server computed');
      assert.equal(processed, primed + r.body.timings.prompt_n, 'priming plus the request itself');
      assert.equal((await warmslotMetric(ws, 'warmslot_prompt_tokens_primed_total')) - primedBefore, primed);
      // The access line is written once the answer is out: the client may read it first.
      const line = new RegExp(`processed=${processed} \\(prime=${primed}, request=${r.body.timings.prompt_n}\\)`);
      await waitFor('the access line', async () => line.test(fs.readFileSync(ws.logFile, 'utf8')), 5000);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });

  test(`${arch}: a restore that times out keeps its file, which restores later`, { timeout: 300000 }, async () => {
    let llama = await startLlama({ arch, slots: 2, ctx: 16384 });
    const relay = await startRelay(() => llama.url);
    const ws = await startWarmslot({ backends: [{ name: 'b', url: relay.url, slotSaveDir: llama.saveDir }],
      extra: `${settings}  slot_call_timeout: 1s\n` });
    const restart = async () => {
      const seen = await warmslotMetric(ws, 'warmslot_belief_corrections_total');
      llama = await restartLlama(llama);
      await waitFor('warmslot to notice the restart', async () =>
        (await warmslotMetric(ws, 'warmslot_belief_corrections_total')) > seen, 15000);
    };
    try {
      await routed(ws);
      const doc = makeDocument(710, 6000);
      const first = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'Q1?'));
      assert.match(first.headers.get('x-warmslot-disk') ?? '', /^snapshot \d+ tokens/);
      const [file] = snapshotFiles(llama.saveDir);
      const size = fs.statSync(path.join(llama.saveDir, file)).size;

      await restart();
      relay.holdRestores = true;
      const slow = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'Q2?'));
      assert.equal(slow.status, 200);
      // One restore held, or two: when the request then meets a pooled connection the restart
      // closed, it is planned again after a check and tries the file once more.
      assert.ok(relay.restoresHeld >= 1 && relay.restoresHeld <= 2, `restores held: ${relay.restoresHeld}`);
      assert.equal(slow.headers.get('x-warmslot-disk'), 'restore failed, file kept, recomputed');
      assert.ok(slow.body.timings.prompt_n >= 5000, 'the request was recomputed');
      assert.equal(fs.statSync(path.join(llama.saveDir, file)).size, size, 'the file is still there');

      relay.holdRestores = false;
      await restart();
      const later = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'Q3?'));
      assert.match(later.headers.get('x-warmslot-disk') ?? '', /^restored \d+ tokens/);
      assert.ok(later.body.timings.prompt_n < 200, `the kept file restored usefully (${later.body.timings.prompt_n})`);
    } finally {
      await ws.stop();
      await relay.stop();
      await llama.stop();
    }
  });
}

for (const arch of ['llama', 'qwen35']) {
  // On a hybrid model llama-server can only roll back to a context checkpoint. A slot primed with
  // exactly the document (no checkpoints) gets one where the question starts from the first
  // question's request, and it stays the first checkpoint of the slot: every later question on
  // the same document costs only itself, even after the same request was repeated (which, without
  // the priming, leaves only checkpoints about n_ubatch tokens before the end).
  test(`${arch}: the same document with other questions costs only the questions`, { timeout: 300000 }, async () => {
    const llama = await startLlama({ arch, slots: 2, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    try {
      await routed(ws);
      const doc = makeDocument(720, 7000);
      const ask = (q) => askAbout(llama, ws, doc, q);
      const first = await ask('What is on the first line?');
      assert.match(first.disk, /^snapshot \d+ tokens/);
      await ask('What is on the first line?');
      for (const q of ['Summarise the third paragraph in one line.', 'Which word comes last?']) {
        const r = await ask(q);
        const bound = (await questionTokens(llama.url, q)) + 16;
        assert.ok(r.processed <= bound, `${q}: processed ${r.processed}, bound ${bound}`);
        assert.equal(r.processed, r.computed);
      }
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

for (const arch of ['llama', 'qwen35']) {
  // With `--ctx-checkpoints 0` (set to save memory: a checkpoint of a large hybrid model is
  // hundreds of MiB) a hybrid slot that holds the document and a first question cannot roll back
  // to the document's end: llama-server recomputes the whole prompt. Told so (`ctx_checkpoints:
  // 0`; a command backend's is read from its command line) and reading the model's architecture
  // from its file, warmslot restores the document's file instead from the first such question
  // on. Not told, it learns it from that first question, which then costs the whole prompt. A
  // plain transformer rolls back for free: its slot is always kept.
  for (const told of arch === 'qwen35' ? [true, false] : [true]) test(`${arch}: a slot that holds the document and more is restored from the file when a rollback costs more, and kept when not${told ? '' : ' (checkpoints not stated: learned)'}`, { timeout: 300000 }, async () => {
    const llama = await startLlama({ arch, slots: 2, ctx: 16384, extra: ['--ctx-checkpoints', '0'] });
    const lines = told ? ['ctx_checkpoints: 0'] : [];
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir, lines }], extra: settings });
    try {
      await routed(ws);
      const doc = makeDocument(730, 7000);
      const ask = (q) => askAbout(llama, ws, doc, q);
      const first = await ask('What is on the first line?');
      assert.match(first.disk, /^snapshot (\d+) tokens/);
      const docTokens = Number(first.disk.match(/^snapshot (\d+)/)[1]);
      const second = await ask('Summarise the third paragraph in one line.');
      assert.equal(second.slot, first.slot);
      assert.equal(second.processed, second.computed);
      const questions = ['Which word comes last?', 'How many lines are there?'];
      if (arch === 'qwen35' && told) {
        // Predicted from the model and the setting: never paid.
        questions.unshift('Summarise the third paragraph in one line.');
      } else {
        // Nothing learned yet: the slot is kept, and says why.
        assert.match(second.disk, /^slot kept: a rollback recomputes ~0 prefix tokens/);
        if (arch === 'qwen35') {
          assert.ok(second.processed > docTokens, `no checkpoint: the whole prompt again (${second.processed})`);
        }
      }
      for (const [i, q] of questions.entries()) {
        const r = i === 0 && questions.length === 3 ? second : await ask(q);
        const bound = (await questionTokens(llama.url, q)) + 16;
        assert.ok(r.processed <= bound, `${q}: processed ${r.processed}, bound ${bound} (${r.disk})`);
        assert.equal(r.processed, r.computed);
        if (arch === 'qwen35') {
          assert.match(r.disk, new RegExp(`^restored ${docTokens} tokens, cheaper than a rollback: a rollback recomputes ~\\d+ prefix tokens`));
        } else {
          assert.match(r.disk, /^slot kept: a rollback recomputes ~0 prefix tokens/);
        }
      }
      assert.match(fs.readFileSync(ws.logFile, "utf8"), arch === 'qwen35' ? /holds prefix \w+ \(\d+ tokens\) and more: restoring its file/
        : /holds prefix \w+ \(\d+ tokens\) and more: kept for a rollback/);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

function indexRows(dir) {
  const out = execFileSync('sqlite3', ['-separator', ' ', path.join(dir, 'warmslot-index.sqlite'),
    'SELECT file, bytes FROM snapshots ORDER BY file;'], { encoding: 'utf8' });
  return out.trim().split('\n').filter(Boolean).map((l) => { const [file, bytes] = l.split(' '); return { file, bytes: Number(bytes) }; });
}

// The crash window of a save: llama-server has written the slot file, warmslot has not heard back
// (so it has not indexed it) when it is killed. The relay proves the kill fell inside the save.
test('warmslot killed inside a save (file written, answer not yet read) restarts with a consistent index and serves the prefix', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const relay = await startRelay(() => llama.url);
  const backends = [{ name: 'b', url: relay.url, slotSaveDir: llama.saveDir }];
  try {
    const ws = await startWarmslot({ backends, extra: settings });
    await routed(ws);
    const filesBefore = snapshotFiles(llama.saveDir).length;
    relay.holdSaveAnswers = true;
    const doc = makeDocument(710, 6000);
    const pending = postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'Q1?')).catch(() => null);
    await waitFor('llama-server to have answered a save that warmslot is still waiting for',
      () => relay.saveAnswersHeld > 0, 120000, 20);
    assert.ok(snapshotFiles(llama.saveDir).length > filesBefore, 'the save wrote its file');
    await ws.proc.stop('SIGKILL');
    assert.equal(relay.saveAnswersHeld, 1, 'killed inside the first save');
    await pending;
    relay.holdSaveAnswers = false;
    await waitFor('llama-server to be idle', async () =>
      !(await getJson(`${llama.url}/slots`)).body.some((s) => s.is_processing), 30000);
    await sleep(100);

    const again = await startWarmslot({ backends, extra: settings });
    try {
      await routed(again);
      const rows = indexRows(llama.saveDir);
      assert.deepEqual(rows.map((r) => r.file), snapshotFiles(llama.saveDir).sort(),
        'every row has its file and every file a row');
      for (const r of rows) assert.equal(fs.statSync(path.join(llama.saveDir, r.file)).size, r.bytes);
      // The same prefix is served again, snapshotted anew (the unindexed file was not trusted).
      const r = await postJson(`${again.url}/v1/chat/completions`, chat(doc, 'Q2?'));
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const after = indexRows(llama.saveDir);
      assert.deepEqual(after.map((x) => x.file), snapshotFiles(llama.saveDir).sort());
      assert.ok(after.length >= 1, 'the prefix is on disk and indexed after the restart');
    } finally {
      await again.stop();
    }
  } finally {
    await relay.stop();
    await llama.stop();
  }
});
