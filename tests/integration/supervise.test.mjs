// Supervised backends: warmslot starts llama-server itself (`command:`), restarts it when it
// dies, starts it on demand, stops it when idle, and saves its valuable slots before every stop.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { assertOnlyQuestionComputed, getJson, llamaServerBin, modelPath, postJson, snapshotFiles } from './lib/llama.mjs';
import { tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const command = () => [llamaServerBin(), '-m', modelPath('llama'), '-c', '32768', '-np', '2', '-t', '2'];
const logText = (ws) => fs.readFileSync(ws.logFile, 'utf8');
const pids = (ws) => [...logText(ws).matchAll(/started llama-server \(pid (\d+)\)/g)].map((m) => Number(m[1]));
// Running: it exists and is not a zombie (an orphan's end may wait for init to reap it).
const alive = (pid) => {
  try { process.kill(pid, 0); } catch { return false; }
  try { return !/^\d+ \(.*\) Z/s.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return false; }
};

// Stops warmslot; should it fail to stop its children (a hang, a crash), they are killed here
// so that no llama-server outlives the test. Their process groups are their own.
async function stopAll(ws) {
  let stopped = false;
  try {
    await ws.stop();
    stopped = true;
  } finally {
    const left = pids(ws).filter(alive);
    for (const pid of left) {
      try { process.kill(-pid, 'SIGKILL'); } catch { /* already gone */ }
    }
    if (stopped && left.length) throw new Error(`llama-server ${left.join(', ')} outlived warmslot`);
  }
}

function settings(cacheDir, extra = '') {
  return `routing:\n  reconcile_interval: 100ms\ncache:\n  dir: ${cacheDir}\n  min_prefix_tokens: 1024\n${extra}`;
}

async function ask(ws, system, question) {
  const r = await postJson(`${ws.url}/v1/chat/completions`, chat(system, question));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { disk: r.headers.get('x-warmslot-disk') ?? '', processed: r.body.timings.prompt_n };
}

async function routed(ws) {
  await waitFor('the supervised backend to be routed', async () => {
    const h = await getJson(`${ws.url}/health`);
    return h.body.backends?.[0]?.status === 'ok' && h.body.backends[0].routing;
  }, 120000, 100);
}

test('a supervised llama-server killed with SIGKILL is restarted, and a known document is restored', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('state');
  const ws = await startWarmslot({ backends: [{ name: 'sup', command: command() }], extra: settings(cacheDir) });
  let last = 0;
  try {
    await routed(ws);
    const [pid] = pids(ws);
    assert.ok(pid > 0 && alive(pid));
    const args = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    for (const flag of ['--host', '--slot-save-path', '--metrics']) assert.ok(args.includes(flag), flag);
    assert.match(args[args.indexOf('--host') + 1], /\/\d+\.sock$/, 'a UNIX socket in warmslot\'s private directory');
    assert.equal(args[args.indexOf('--slot-save-path') + 1], path.join(cacheDir, 'slots', 'sup'));
    assert.ok(fs.existsSync(path.join(cacheDir, 'logs', 'sup.log')));

    const doc = makeDocument(500, 7000);
    const first = await ask(ws, doc, 'What is on the first line?');
    assert.match(first.disk, /^snapshot \d+ tokens$/);

    process.kill(pid, 'SIGKILL');
    await waitFor('the backend to be restarted', () => pids(ws).length === 2, 30000, 50);
    last = pids(ws)[1];
    assert.notEqual(last, pid);
    assert.match(logText(ws), /backend sup: llama-server \(pid \d+\) killed by signal 9/);
    await routed(ws);

    const q = 'What is on the last line?';
    const again = await ask(ws, doc, q);
    assert.match(again.disk, /^restored \d+ tokens$/);
    await assertOnlyQuestionComputed(again, ws.url, q);
  } finally {
    await stopAll(ws);
  }
  assert.equal(alive(last), false, 'the supervised llama-server stops with warmslot');
});

test('a warmslot killed with SIGKILL leaves no supervised llama-server running', { timeout: 300000 }, async () => {
  const ws = await startWarmslot({ backends: [{ name: 'sup', command: command() }], extra: settings(tempDir('state')) });
  try {
    await routed(ws);
    const [pid] = pids(ws);
    assert.ok(alive(pid));
    assert.equal((await ws.proc.stop('SIGKILL')).signal, 'SIGKILL');  // warmslot's group only
    await waitFor('llama-server to end with warmslot', () => !alive(pid), 30000, 50);
  } finally {
    if (ws.proc.running) await stopAll(ws);
    for (const p of pids(ws).filter(alive)) {
      try { process.kill(-p, 'SIGKILL'); } catch { /* already gone */ }
    }
  }
});

test('a supervised llama-server gets the allow-listed environment and env, not warmslot\'s secrets', { timeout: 300000 }, async () => {
  const key = 'ws-key-4f1c9a7e2b';
  const ws = await startWarmslot({
    backends: [{ name: 'sup', command: command(), lines: ['env:', '  WARMSLOT_TEST_SETTING: configured', '  LLAMA_TEST_OVERRIDE: from-config'] }],
    apiKeys: ['${WARMSLOT_API_KEY}'],
    extra: settings(tempDir('state')),
    env: {
      WARMSLOT_API_KEY: key, OPENAI_API_KEY: 'sk-not-for-llama', MY_SERVICE_TOKEN: 'tok-secret',
      LLAMA_TEST_PASSED: 'passed', LLAMA_TEST_OVERRIDE: 'from-warmslot', TZ: 'Asia/Tokyo',
    },
  });
  try {
    await waitFor('the supervised backend to be routed', async () => {
      const h = await getJson(`${ws.url}/health`, { headers: { authorization: `Bearer ${key}` } });
      return h.body.backends?.[0]?.status === 'ok' && h.body.backends[0].routing;
    }, 120000, 100);
    const [pid] = pids(ws);
    const environ = Object.fromEntries(fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')
      .filter((e) => e.includes('=')).map((e) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
    assert.match(fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'), /llama-server/);
    for (const secret of ['WARMSLOT_API_KEY', 'OPENAI_API_KEY', 'MY_SERVICE_TOKEN']) {
      assert.equal(environ[secret], undefined, `${secret} reached llama-server`);
    }
    assert.ok(!Object.values(environ).includes(key), 'the API key reached llama-server');
    assert.equal(environ.PATH, process.env.PATH);  // allow-listed
    assert.equal(environ.TZ, 'Asia/Tokyo');
    assert.equal(environ.LLAMA_TEST_PASSED, 'passed');  // LLAMA_* passes
    assert.equal(environ.WARMSLOT_TEST_SETTING, 'configured');  // from env:
    assert.equal(environ.LLAMA_TEST_OVERRIDE, 'from-config');  // env: wins
    const r = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi'), { authorization: `Bearer ${key}` });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  } finally {
    await stopAll(ws);
  }
});

test('on demand: started by the first request, stopped when idle after a save, restored on the next', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('state');
  const ws = await startWarmslot({
    backends: [{ name: 'lazy', command: command(), lines: ['start: on_demand', 'idle_stop: 2s'] }],
    // Below snapshot_after_uses the request path saves nothing: only the stop saves.
    extra: settings(cacheDir, '  snapshot_after_uses: 5\n'),
  });
  const slotDir = path.join(cacheDir, 'slots', 'lazy');
  try {
    const h = await getJson(`${ws.url}/health`);
    assert.equal(h.body.backends[0].status, 'unreachable');
    assert.equal(pids(ws).length, 0, 'nothing started before a request');

    const doc = makeDocument(501, 7000);
    const first = await ask(ws, doc, 'What is on the first line?');
    assert.equal(first.disk, '');
    assert.equal(pids(ws).length, 1);
    assert.equal(snapshotFiles(slotDir).length, 0);

    await waitFor('the idle backend to stop', () => /stopped llama-server \(pid \d+, idle\)/.test(logText(ws)), 30000, 50);
    assert.equal(alive(pids(ws)[0]), false);
    assert.equal(snapshotFiles(slotDir).length, 1, 'its valuable slot was saved before the stop');

    const q = 'What is on the last line?';
    const again = await ask(ws, doc, q);
    assert.equal(pids(ws).length, 2, 'started again on demand');
    assert.match(again.disk, /^restored \d+ tokens$/);
    await assertOnlyQuestionComputed(again, ws.url, q);
  } finally {
    await stopAll(ws);
  }
  for (const pid of pids(ws)) assert.equal(alive(pid), false);
});

test('SIGTERM saves the valuable slots of a supervised backend before stopping it', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('state');
  const backends = [{ name: 'sup', command: command() }];
  const extra = settings(cacheDir, '  snapshot_after_uses: 5\n');
  const slotDir = path.join(cacheDir, 'slots', 'sup');
  const doc = makeDocument(502, 7000);
  let ws = await startWarmslot({ backends, extra });
  try {
    await routed(ws);
    await ask(ws, doc, 'What is on the first line?');
    assert.equal(snapshotFiles(slotDir).length, 0);
  } finally {
    await stopAll(ws);
  }
  assert.equal(snapshotFiles(slotDir).length, 1);
  assert.equal(alive(pids(ws)[0]), false);

  ws = await startWarmslot({ backends, extra });
  try {
    await routed(ws);
    const q = 'What is in the middle?';
    const r = await ask(ws, doc, q);
    assert.match(r.disk, /^restored \d+ tokens$/);
    await assertOnlyQuestionComputed(r, ws.url, q);
  } finally {
    await stopAll(ws);
  }
});

test('on demand: idle_stop never stops a process that is still loading for the request that woke it', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('state');
  // An idle_stop far shorter than llama-server's load: the process is not idle while it loads.
  const ws = await startWarmslot({
    backends: [{ name: 'lazy', command: command(), lines: ['start: on_demand', 'idle_stop: 50ms', 'start_timeout: 60s'] }],
    extra: settings(cacheDir),
  });
  try {
    const first = await ask(ws, 'You are terse.', 'Hi');
    assert.equal(first.processed > 0, true);
    assert.equal(pids(ws).length, 1, 'one start served the request');
    // Once it served, it is idle, and stops.
    await waitFor('the idle backend to stop', () => /stopped llama-server \(pid \d+, idle\)/.test(logText(ws)), 30000, 50);
  } finally {
    await stopAll(ws);
  }
  for (const pid of pids(ws)) assert.equal(alive(pid), false);
});
