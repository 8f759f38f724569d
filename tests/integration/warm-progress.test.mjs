// `warmslot warm` shows the warm-up's progress while llama-server computes the document: one
// line redrawn in place on a terminal (a pseudo-terminal made by `script`), a line per tenth of
// the prefix when piped; --json gives the server's report, --quiet nothing. Ctrl-C during the
// prefill cancels the task on the server: its slots are idle 2 s later.
//
// The document is long enough (WARM_DOC_BYTES, default 24000) for a prefill of many seconds on
// the plain test model run with one thread and 512-token batches.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { getJson, snapshotFiles, startLlama } from './lib/llama.mjs';
import { sleep, tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot, warmslotBin } from './lib/warmslot.mjs';
import { makeDocument } from './lib/text.mjs';

const docBytes = Number(process.env.WARM_DOC_BYTES ?? 24000);
const settings = (reconcile) => `routing:\n  reconcile_interval: ${reconcile}\ncache:\n  min_prefix_tokens: 1024\n`;
const progressLine = /^prefill\s+(\d+) \/ (\d+) tokens\s+(\d+)%/;

async function setUp(reconcile = '100ms') {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: docBytes + 4096,
    extra: ['-t', '1', '-b', '512', '-ub', '512'] });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings(reconcile) });
  await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
  const dir = tempDir('warm-progress');
  const doc = (seed) => {
    const file = path.join(dir, `doc-${seed}.txt`);
    fs.writeFileSync(file, makeDocument(seed, docBytes));
    return file;
  };
  const args = (file) => ['warm', '--model', 'tiny', '--doc', file, '--url', ws.url];
  return { llama, ws, doc, args, stop: async () => { await ws.stop(); await llama.stop(); } };
}

test('piped: a line per tenth of the prefix, rising, then the summary; --json and --quiet', { timeout: 600000 }, async (t) => {
  const s = await setUp();
  try {
    const file = s.doc(5001);
    const r = spawnSync(warmslotBin(), s.args(file), { encoding: 'utf8', timeout: 300000 });
    t.diagnostic(r.stdout);
    assert.equal(r.status, 0, r.stderr);
    const lines = r.stdout.trim().split('\n');
    const progress = lines.map((l) => l.match(progressLine)).filter(Boolean)
      .map((m) => ({ done: Number(m[1]), total: Number(m[2]), percent: Number(m[3]) }));
    assert.ok(progress.length >= 3, `progress lines: ${r.stdout}`);
    assert.ok(!r.stdout.includes('\r'), 'no redrawing when piped');
    const total = progress[0].total;
    assert.ok(total > docBytes * 0.9, `total ${total}`);
    for (let i = 1; i < progress.length; i++) {
      assert.equal(progress[i].total, total);
      assert.ok(progress[i].done > progress[i - 1].done, `rising: ${JSON.stringify(progress)}`);
      // One line per tenth crossed: never two in the same tenth.
      assert.ok(Math.floor(progress[i].percent / 10) > Math.floor(progress[i - 1].percent / 10));
    }
    assert.match(lines.filter((l) => l.startsWith('prefill')).slice(-2).join('\n'), /tokens\/s\s+\d+ s left/);
    assert.match(lines.at(-1), new RegExp(`^saved ${total} tokens on backend b slot \\d in \\d+ s`));
    assert.equal(snapshotFiles(s.llama.saveDir).length, 1);

    const json = spawnSync(warmslotBin(), [...s.args(file), '--json'], { encoding: 'utf8' });
    assert.equal(json.status, 0, json.stderr);
    assert.equal(JSON.parse(json.stdout).reason, 'already on disk');
    const quiet = spawnSync(warmslotBin(), [...s.args(file), '--quiet'], { encoding: 'utf8' });
    assert.equal(quiet.status, 0, quiet.stderr);
    assert.equal(quiet.stdout, '');
  } finally {
    await s.stop();
  }
});

test('on a terminal: one progress line redrawn in place', { timeout: 600000 }, async (t) => {
  const s = await setUp();
  try {
    const command = [warmslotBin(), ...s.args(s.doc(5002))].map((a) => `'${a}'`).join(' ');
    const r = spawnSync('script', ['-qfec', command, '/dev/null'], { encoding: 'utf8', timeout: 300000 });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    const redraws = r.stdout.split('\r\x1b[K').slice(1).map((l) => l.match(progressLine)).filter(Boolean);
    t.diagnostic(`${redraws.length} redraws; last: ${JSON.stringify(r.stdout.slice(-200))}`);
    assert.ok(redraws.length >= 3, JSON.stringify(r.stdout.slice(0, 500)));
    const done = redraws.map((m) => Number(m[1]));
    assert.ok(done.every((d, i) => i === 0 || d >= done[i - 1]), `rising: ${done}`);
    assert.match(r.stdout, /\n?saved \d+ tokens on backend b slot \d in \d+ s/);
  } finally {
    await s.stop();
  }
});

// llama-server (this build) notices a closed connection only when no other answer wakes its wait
// for a whole second: GET /slots every 100 ms (a short reconcile_interval, or this test polling)
// keeps a cut prefill running. So the monitor looks every 5 s here, and the test looks at the
// slots once, 2 s after Ctrl-C.
test('Ctrl-C during the prefill cancels it on the server: slots idle 2 s later, nothing saved', { timeout: 600000 }, async (t) => {
  const s = await setUp('5s');
  try {
    const child = spawn(warmslotBin(), s.args(s.doc(5003)), { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await waitFor('the prefill under way', () => progressLine.test(out), 120000, 20);
      const at = Date.now();
      child.kill('SIGINT');
      const code = await exited;
      await sleep(2000 - (Date.now() - at));
      const slots = (await getJson(`${s.llama.url}/slots`)).body;
      const lastLine = out.trim().split('\n').at(-1);
      t.diagnostic(`after SIGINT: exit ${code} in ${Date.now() - at} ms; slots ${JSON.stringify(slots.map((x) => [x.id, x.is_processing, x.n_prompt_tokens]))}; last progress: ${lastLine}; ${err.trim()}`);
      assert.ok(slots.every((x) => !x.is_processing), 'the prefill still runs 2 s after Ctrl-C');
      const m = lastLine.match(progressLine);
      assert.ok(m && Number(m[1]) < Number(m[2]), 'interrupted during the prefill');
      assert.equal(code, 130);
      assert.match(err, /interrupted; warmslot closed its connection to llama-server, which cancels the prefill; nothing is saved/);
      assert.equal(snapshotFiles(s.llama.saveDir).length, 0);
    } finally {
      child.kill('SIGKILL');
    }
  } finally {
    await s.stop();
  }
});
