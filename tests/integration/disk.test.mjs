// The disk tier against real llama-server processes: exact-prefix snapshots, restores after a
// backend restart (plain and hybrid models), corrupt files, a killed proxy, the disk budget.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { assertOnlyQuestionComputed, getJson, postJson, restartLlama, snapshotFiles, startLlama } from './lib/llama.mjs';
import { sleep, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { askChat as ask, diskSettings as settings } from './lib/ask.mjs';
import { chat, makeDocument } from './lib/text.mjs';

async function routed(ws) {
  await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
}

function indexRows(dir) {
  const out = execFileSync('sqlite3', ['-separator', ' ', path.join(dir, 'warmslot-index.sqlite'),
    'SELECT file, bytes FROM snapshots ORDER BY file;'], { encoding: 'utf8' });
  return out.trim().split('\n').filter(Boolean).map((l) => { const [file, bytes] = l.split(' '); return { file, bytes: Number(bytes) }; });
}

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: after a backend restart a known document is restored, not recomputed`, { timeout: 300000 }, async () => {
    let llama = await startLlama({ arch, slots: 3, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    try {
      await routed(ws);
      const doc = makeDocument(300, 7000);
      const first = await ask(ws, doc, 'What is on the first line?');
      assert.match(first.disk, /^snapshot \d+ tokens$/);
      assert.equal(snapshotFiles(llama.saveDir).length, 1);

      llama = await restartLlama(llama);
      await waitFor('warmslot to notice the restart', async () => {
        const m = await (await fetch(`${ws.url}/metrics`)).text();
        return /warmslot_belief_corrections_total [1-9]/.test(m);
      }, 10000);
      const q = 'And what is on the last line?';
      const after = await ask(ws, doc, q);
      assert.match(after.disk, /^restored \d+ tokens$/);
      await assertOnlyQuestionComputed(after, llama.url, q);
    } finally {
      await ws.stop();
      await llama.stop();
    }
  });
}

test('a corrupted snapshot fails its restore, is dropped, and the request is recomputed', { timeout: 300000 }, async () => {
  let llama = await startLlama({ arch: 'qwen35', slots: 3, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
  try {
    await routed(ws);
    const doc = makeDocument(301, 6500);
    await ask(ws, doc, 'Q1?');
    const [file] = snapshotFiles(llama.saveDir);
    const full = path.join(llama.saveDir, file);
    fs.writeFileSync(full, Buffer.alloc(fs.statSync(full).size, 0x5a));  // same size, garbage
    llama = await restartLlama(llama);
    await waitFor('the restart to be noticed', async () =>
      /warmslot_belief_corrections_total [1-9]/.test(await (await fetch(`${ws.url}/metrics`)).text()), 10000);
    const r = await ask(ws, doc, 'Q2?');
    assert.equal(r.disk, 'restore failed, file dropped, recomputed');
    assert.ok(r.processed >= 6000, 'the document was recomputed');
    assert.ok(!fs.existsSync(full), 'the bad file is gone');
    assert.deepEqual(indexRows(llama.saveDir), []);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('the disk budget holds', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const budget = 10 * 1024 * 1024;
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: `${settings}  max_disk: 10MiB\n` });
  try {
    await routed(ws);
    for (let i = 0; i < 4; i++) await ask(ws, makeDocument(400 + i, 4000), `Q${i}?`);
    const files = snapshotFiles(llama.saveDir);
    const total = files.reduce((n, f) => n + fs.statSync(path.join(llama.saveDir, f)).size, 0);
    assert.ok(files.length >= 1, 'snapshots were made');
    assert.ok(total <= budget, `${total} bytes on disk, budget ${budget}`);
    assert.deepEqual(indexRows(llama.saveDir).map((r) => r.file), files.sort());
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

test('warmslot killed with SIGKILL during saves leaves a consistent index', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const backends = [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }];
  try {
    for (let round = 0; round < 3; round++) {
      const ws = await startWarmslot({ backends, extra: settings });
      await routed(ws);
      const pending = postJson(`${ws.url}/v1/chat/completions`, chat(makeDocument(500 + round, 6000), 'Q?'))
        .catch(() => null);
      await sleep(40 + 60 * round);  // somewhere in priming, saving or indexing
      await ws.proc.stop('SIGKILL');
      await pending;
      await waitFor('llama-server to be idle', async () =>
        !(await getJson(`${llama.url}/slots`)).body.some((s) => s.is_processing), 30000);
      // A restarted warmslot reconciles the index with the directory at start.
      const again = await startWarmslot({ backends, extra: settings });
      await routed(again);
      const rows = indexRows(llama.saveDir);
      const files = snapshotFiles(llama.saveDir).sort();
      assert.deepEqual(rows.map((r) => r.file), files, 'every row has its file and every file a row');
      for (const r of rows) assert.equal(fs.statSync(path.join(llama.saveDir, r.file)).size, r.bytes);
      await again.stop();
    }
  } finally {
    await llama.stop();
  }
});

test('a sliding-window model whose restores save nothing gets no more restores after three, with a warning', { timeout: 400000 }, async () => {
  // gemma2 without --swa-full: a restored slot is reprocessed in full (llama-server-behaviour.md).
  let llama = await startLlama({ arch: 'gemma2', slots: 3, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'swa', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
  try {
    await routed(ws);
    const doc = makeDocument(600, 6000);
    assert.match((await ask(ws, doc, 'Q1?')).disk, /^snapshot \d+ tokens$/);
    const corrections = async () =>
      Number((await (await fetch(`${ws.url}/metrics`)).text()).match(/warmslot_belief_corrections_total (\d+)/)[1]);
    const restartAndWait = async () => {
      const before = await corrections();
      llama = await restartLlama(llama);
      await waitFor('the restart to be noticed', async () => (await corrections()) > before, 10000);
    };
    // One useless restore (a template that renders today's date does that too) is not enough.
    for (let i = 0; i < 3; i++) {
      await restartAndWait();
      const restored = await ask(ws, doc, `Q${i + 2}?`);
      assert.match(restored.disk, /^restored \d+ tokens/);
      assert.ok(restored.processed >= 5000, `the restore saved nothing here (processed ${restored.processed})`);
      const log = fs.readFileSync(ws.logFile, 'utf8');
      assert.equal((log.match(/cannot resume from a slot file/g) ?? []).length, i === 2 ? 1 : 0);
    }
    await restartAndWait();
    const after = await ask(ws, doc, 'Q5?');
    assert.equal(after.disk, '', 'restores pause on this backend');
    const log = fs.readFileSync(ws.logFile, 'utf8');
    assert.equal((log.match(/cannot resume from a slot file/g) ?? []).length, 1, 'warned once');
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
