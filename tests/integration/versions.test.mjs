// The disk, rollback and priming tests again on every other pinned llama.cpp (tests/llama/pins;
// every other test runs on the first pin): users update llama.cpp often, and warmslot's
// restores, rollbacks and primings rest on how llama-server keeps context checkpoints and
// loads slot files, which changes between versions. The ground truth itself runs on every pin
// (ground-truth.test.mjs). Each file runs in a child test runner with WARMSLOT_LLAMA_PIN set.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { llamaPins } from './lib/llama.mjs';
import { repoRoot } from './lib/procs.mjs';

const files = [
  // restores after a backend restart, plain and hybrid; corrupt files; the disk budget
  'disk.test.mjs',
  // files saved after the answer (plain), primed before it (hybrid)
  'save-after-answer.test.mjs',
  // which prefixes get files, rollbacks against restores, checkpoints after a priming
  'disk-policy.test.mjs',
  // token prefixes: learned split points, primed in two steps on the hybrid model
  'token-prefix.test.mjs',
  // prompts tokenized by parts give llama-server's own tokens (its tokenizer and /tokenize)
  'token-parts.test.mjs',
  // a server that sleeps (--sleep-idle-seconds): let sleep, saved before, restored after
  'sleep.test.mjs',
  // a router's models: saved before warmslot unloads one for another, restored after
  'router.test.mjs',
  // Messages requests placed by llama-server on the slot warmslot prepared (hybrid checkpoints)
  'floating.test.mjs',
  // the test models' answers read their prompt, and warmslot's cache paths give llama-server's
  // own answers
  'models.test.mjs',
  'answers.test.mjs',
];

function runFile(file, pin, timeoutMs) {
  // A child of the test runner would otherwise take itself for a nested run and skip its files.
  const { NODE_TEST_CONTEXT, ...env } = process.env;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--test', '--test-concurrency=1',
      path.join(repoRoot, 'tests/integration', file)],
    { env: { ...env, WARMSLOT_LLAMA_PIN: pin }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { out += d; });
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.on('close', (code) => { clearTimeout(timer); resolve({ code, out }); });
  });
}

for (const pin of llamaPins.slice(1)) {
  for (const file of files) {
    test(`on ${pin}: ${file}`, { timeout: 1800000 }, async () => {
      const run = await runFile(file, pin, 1700000);
      const passed = Number(run.out.match(/^# pass (\d+)/m)?.[1] ?? 0);
      const failed = Number(run.out.match(/^# fail (\d+)/m)?.[1] ?? -1);
      console.log(`# ${pin}: ${file}: ${passed} passed, ${failed} failed`);
      assert.ok(passed > 0, `no test ran in ${file}:\n${run.out}`);
      assert.equal(run.code, 0, `on ${pin}, ${file} failed:\n${run.out}`);
      assert.equal(failed, 0);
    });
  }
}
