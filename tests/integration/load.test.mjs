// The load variant: cache decisions that hold on a busy machine. warmslot decides by timing in
// places (when a check runs, whether a slot is idle yet, how long a save takes); llama-server's
// own choices do not depend on it. Each test named below runs again, unchanged and with its idle
// targets, while a busy loop runs on every core for the whole test: the floating Messages
// questions on the hybrid model without checkpoints, a request sent the moment a restarted
// llama-server answers, a restart between two checks, a request sent while the only backend is
// down, and Claude Code's sessions with the coding-agent rules (the session after a llama-server
// restart restored, not recomputed).
//
// The busy loops are plain processes at normal priority, started before the test and killed after
// it (and when this file exits for any reason).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { repoRoot } from './lib/procs.mjs';

const cases = [
  ['floating.test.mjs', 'qwen35 -np 2 without checkpoints: Messages requests run on the slot warmslot prepared'],
  ['backend-state.test.mjs', 'a request sent as soon as a restarted backend answers /health gets its prefix restored'],
  ['backend-state.test.mjs', 'a restart between two checks is seen when the process ends: both documents are restored after it'],
  ['backend-state.test.mjs', 'a request sent while its only backend is down waits for it and gets its prefix restored'],
  ['agents.test.mjs', 'claude on (llama|qwen35): sessions through warmslot cost no more than straight'],
];

const loaders = new Set();
process.on('exit', () => { for (const l of loaders) l.kill('SIGKILL'); });

function startLoad() {
  const n = os.availableParallelism();
  for (let i = 0; i < n; i++) loaders.add(spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
  return n;
}

function stopLoad() {
  for (const l of loaders) l.kill('SIGKILL');
  loaders.clear();
}

const escape = (s) => s.replace(/[.*+?^${}()[\]\\]/g, '\\$&');

// Runs the named tests of one file in a child test runner; resolves with its exit code and output.
function runTests(file, pattern, timeoutMs) {
  // A child of the test runner would otherwise take itself for a nested run and skip its files.
  const { NODE_TEST_CONTEXT, ...env } = process.env;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--test', '--test-concurrency=1', `--test-name-pattern=${pattern}`,
      path.join(repoRoot, 'tests/integration', file)], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { out += d; });
    const timer = setTimeout(() => child.kill('SIGTERM'), timeoutMs);
    child.on('close', (code) => { clearTimeout(timer); resolve({ code, out }); });
  });
}

for (const [file, name] of cases) {
  test(`under load on every core: ${file} "${name}"`, { timeout: 1800000 }, async () => {
    const pattern = name.includes('(') ? name : escape(name);
    const cores = startLoad();
    let run;
    try {
      run = await runTests(file, pattern, 1700000);
    } finally {
      stopLoad();
    }
    const passed = Number(run.out.match(/^# pass (\d+)/m)?.[1] ?? 0);
    const failed = Number(run.out.match(/^# fail (\d+)/m)?.[1] ?? -1);
    console.log(`# ${cores} busy loops; ${passed} passed, ${failed} failed`);
    assert.ok(passed > 0, `no test matched /${pattern}/ in ${file}:\n${run.out}`);
    assert.equal(run.code, 0, `under load (${cores} busy loops), ${file} failed:\n${run.out}`);
    assert.equal(failed, 0);
  });
}
