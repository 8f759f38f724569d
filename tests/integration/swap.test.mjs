// Swap groups: two supervised llama-servers that may not run together (a plain and a hybrid
// model) and a third outside the group. Switching between them drains, saves and stops one and
// starts the other; switching back restores the document from disk instead of computing it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { getJson, llamaServerBin, modelPath, postJson, questionTokens, startLlama } from './lib/llama.mjs';
import { answerTokens, assertSameAnswer, referenceAnswer } from './lib/answers.mjs';
import { runScript, tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const logText = (ws) => fs.readFileSync(ws.logFile, 'utf8');
const server = (model) => [llamaServerBin(), '-m', model, '-c', '32768', '-np', '2', '-t', '1'];

// The live (not zombie) processes whose command line holds `needle`, from /proc.
function processesWith(needle) {
  const found = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(needle)) continue;
      if (/^\d+ \(.*\) Z/s.test(fs.readFileSync(`/proc/${entry}/stat`, 'utf8'))) continue;
      found.push(Number(entry));
    } catch { /* gone meanwhile */ }
  }
  return found;
}

// Samples the process list until stopped: the most processes of the group seen at once.
function watchGroup(slotDirs) {
  let most = 0;
  let samples = 0;
  const timer = setInterval(() => {
    const n = slotDirs.reduce((sum, dir) => sum + processesWith(`${dir}\0`).length, 0);
    most = Math.max(most, n);
    samples++;
  }, 20);
  return { stop: () => { clearInterval(timer); return { most, samples }; } };
}

// Kills whatever llama-server of this test outlived warmslot (their groups are their own).
function killLeft(cacheDir) {
  for (const pid of processesWith(path.join(cacheDir, 'slots'))) {
    try { process.kill(-pid, 'SIGKILL'); } catch { /* already gone */ }
  }
}

// The URL of the running process of `backend` (unix:<socket path>), from warmslot's log.
function backendUrl(ws, backend) {
  const all = [...logText(ws).matchAll(new RegExp(`backend ${backend}: started llama-server \\(pid \\d+\\) on ((?:http|unix):[^,\\s]+)`, 'g'))];
  return all.at(-1)?.[1];
}

// The key warmslot gave that process (supervised llama-servers answer only warmslot), read from
// its environment as only its own user can: headers for the test's direct calls to it.
function backendAuth(ws, backend) {
  const all = [...logText(ws).matchAll(new RegExp(`backend ${backend}: started llama-server \\(pid (\\d+)\\)`, 'g'))];
  const env = fs.readFileSync(`/proc/${all.at(-1)[1]}/environ`, 'utf8').split('\0');
  const key = env.find((e) => e.startsWith('LLAMA_API_KEY='))?.slice('LLAMA_API_KEY='.length);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function metric(url, name, headers = {}) {
  const text = String((await getJson(`${url}/metrics`, { headers })).body);
  return Number(text.match(new RegExp(`^${name.replace(/[{}"]/g, '\\$&')} (\\S+)`, 'm'))?.[1] ?? NaN);
}

// The tokens of warmslot's slot probe on a new process (two tiny prompts, one per slot): work
// a new llama-server does before any request, not part of a request's cost.
async function probeTokens(url, headers) {
  let n = 0;
  for (const slot of [0, 1]) {
    const r = await postJson(`${url}/tokenize`, { content: `${slot}`, add_special: true }, headers);
    n += r.body.tokens.length;
  }
  return n;
}

function config(cacheDir, a, b, c) {
  return {
    backends: [
      { name: 'a', command: server(a), lines: ['models: [model-a]'] },
      { name: 'b', command: server(b), lines: ['models: [model-b]'] },
      { name: 'c', command: server(c), lines: ['models: [model-c]'] },
    ],
    // In-flight requests finish before a swap stops their process (10 requests of 8K tokens on
    // a shared 2-core machine may take longer than the default drain_grace).
    extra: `routing:\n  reconcile_interval: 100ms\ncache:\n  dir: ${cacheDir}\n  min_prefix_tokens: 1024\n` +
      'swap_groups:\n  - name: gpu\n    backends: [a, b]\n    min_residency: 1s\n    drain_grace: 120s\n',
  };
}

async function ask(ws, model, doc, q) {
  const r = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, q, { model, max_tokens: answerTokens }));
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  return { text: r.body.choices[0].message.content, disk: r.headers.get('x-warmslot-disk') ?? '',
    processed: r.body.timings.prompt_n, cached: r.body.timings.cache_n, backend: r.headers.get('x-warmslot-backend'),
    route: r.headers.get('x-warmslot-route') ?? '' };
}

test('swap group: A, B, A, B with an 8K-token document each; switching back restores; never both at once; 20 requests at once during swaps', { timeout: 900000 }, async (t) => {
  const cacheDir = tempDir('swap');
  const models = { a: modelPath('llama'), b: modelPath('qwen35'), c: runScript('tests/models/models.sh', ['llama', 'tiny', '2']) };
  const ws = await startWarmslot(config(cacheDir, models.a, models.b, models.c));
  const slotDirs = ['a', 'b'].map((n) => path.join(cacheDir, 'slots', n));
  const watch = watchGroup(slotDirs);
  const docs = { a: makeDocument(2401, 8000), b: makeDocument(2402, 8000) };
  const expected = new Map();  // model and question -> the answer's text
  const roundAnswers = new Map();  // model and question -> the whole answer of its round
  const report = [];
  try {
    await waitFor('c, outside the group, to be up', async () =>
      (await getJson(`${ws.url}/health`)).body.backends?.find((x) => x.name === 'c')?.status === 'ok', 120000, 100);
    assert.equal(processesWith(`${slotDirs[0]}\0`).length + processesWith(`${slotDirs[1]}\0`).length, 0,
      'no member of the group starts before a request needs it');

    const rounds = [['a', 'What is on the first line?'], ['b', 'What is on the first line?'],
      ['a', 'What is on the last line?'], ['b', 'What is on the last line?'],
      ['a', 'What is in the middle?'], ['b', 'What is in the middle?']];
    for (const [i, [m, q]] of rounds.entries()) {
      const before = await metric(ws.url, 'warmslot_prompt_tokens_processed_total');
      const answer = await ask(ws, `model-${m}`, docs[m], q);
      assert.equal(answer.backend, m);
      expected.set(`${m}|${q}`, answer.text);
      const url = backendUrl(ws, m);
      const auth = backendAuth(ws, m);
      const viaWarmslot = (await metric(ws.url, 'warmslot_prompt_tokens_processed_total')) - before;
      // The process is new: all it ever computed is the probe and this request.
      const own = (await metric(url, 'llamacpp:prompt_tokens_total', auth)) - (await probeTokens(url, auth));
      report.push({ model: m, q, disk: answer.disk, processed: answer.processed, viaWarmslot, own });
      roundAnswers.set(`${m}|${q}`, answer);
      if (i < 2) {
        assert.match(answer.disk, /^snapshot \d+ tokens$/, JSON.stringify(answer));
        assert.ok(own > 7000, `the first visit computes the document: ${own}`);
        continue;
      }
      assert.match(answer.disk, /^restored \d+ tokens$/, JSON.stringify(answer));
      const bound = (await questionTokens(url, q, auth)) + 64;
      assert.ok(own <= bound, `switch back to ${m}: llama-server computed ${own}, bound ${bound}`);
      assert.ok(viaWarmslot <= bound, `switch back to ${m}: warmslot counted ${viaWarmslot}, bound ${bound}`);
    }
    assert.ok((await metric(ws.url, 'warmslot_swaps_total')) >= 5, 'five swaps counted');
    for (const phase of ['drain', 'save', 'stop', 'start', 'restore']) {
      assert.ok((await metric(ws.url, `warmslot_swap_seconds_total{phase="${phase}"}`)) >= 0, phase);
    }
    assert.ok((await metric(ws.url, 'warmslot_swap_seconds_total{phase="start"}')) > 0);
    // Every switch back began with a restore into the member that came in: its own phase.
    assert.ok((await metric(ws.url, 'warmslot_swap_seconds_total{phase="restore"}')) > 0, 'restore seconds');
    assert.equal((logText(ws).match(/backend [ab]: first restore after its swap in: [\d.]+ s/g) ?? []).length, 4,
      'one first restore per switch back');

    // Every model of every backend, with its state. A member turns from starting to running at
    // the supervisor's next tick after its first check: on a fast machine the last answer can
    // come before that tick.
    const states = async () => Object.fromEntries((await getJson(`${ws.url}/v1/models`)).body.data
      .filter((x) => x.id.startsWith('model-')).map((x) => [x.id, x.state]));
    await waitFor('model-b to be listed running', async () => (await states())['model-b'] === 'running', 10000, 50);
    assert.deepEqual(await states(), { 'model-a': 'stopped', 'model-b': 'running', 'model-c': 'running' });
    const status = (await getJson(`${ws.url}/warmslot/status`)).body;
    assert.deepEqual(status.swaps.groups[0].members.map((x) => [x.backend, x.state]),
      [['a', 'stopped'], ['b', 'running']]);
    assert.ok(status.swaps.totals.restore_seconds > 0, JSON.stringify(status.swaps.totals));

    // Each round answered what a llama-server of its model answers from scratch (the switches
    // back came from restored files), one such server per model, started as the members are.
    for (const [m, arch] of [['a', 'llama'], ['b', 'qwen35']]) {
      const ref = await startLlama({ arch, model: models[m], slots: 2, ctx: 16384, extra: ['-t', '1', '--cache-ram', '0'] });
      try {
        for (const [key, answer] of roundAnswers) {
          const [model, q] = key.split('|');
          if (model !== m) continue;
          const want = await referenceAnswer(ref, chat(docs[m], q, { max_tokens: answerTokens }));
          assertSameAnswer(answer, want, `model ${m}, "${q}"`);
        }
      } finally {
        await ref.stop();
      }
    }

    // 20 requests at once, 10 for each model, while the group swaps between them.
    const swapsBefore = await metric(ws.url, 'warmslot_swaps_total');
    const questions = [...expected.keys()];
    const burst = Array.from({ length: 20 }, (_, i) => questions[i % questions.length].split('|'));
    const answers = await Promise.all(burst.map(([m, q]) => ask(ws, `model-${m}`, docs[m], q)));
    for (const [i, [m, q]] of burst.entries()) {
      assert.equal(answers[i].backend, m);
      assert.equal(answers[i].text, expected.get(`${m}|${q}`), `answer ${i} (${m}: ${q})`);
    }
    const burstSwaps = (await metric(ws.url, 'warmslot_swaps_total')) - swapsBefore;
    assert.ok(burstSwaps > 0, 'the group swapped during the burst');
    // No thrashing, fair turns: the member holding the group is drained for the other's oldest
    // waiter, and all requests of a model that waited together start together; a model gets the
    // group back at most once more for requests that came while its drain began.
    assert.ok(burstSwaps <= 3, `20 requests of two models took ${burstSwaps} swaps`);
    const seen = watch.stop();
    assert.ok(seen.samples > 100, `the process list was sampled (${seen.samples})`);
    assert.equal(seen.most, 1, 'never two processes of the group at once');
    assert.equal(processesWith(`${models.c}\0`).filter((p) => fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(cacheDir)).length, 1,
      'c, outside the group, kept running');
    assert.match(logText(ws), /backend [ab]: swapped out \(drain [\d.]+ s, save [\d.]+ s, stop [\d.]+ s\)/);
    t.diagnostic(JSON.stringify({ report, burstSwaps, swaps: await metric(ws.url, 'warmslot_swaps_total') }));
  } finally {
    watch.stop();
    try { await ws.stop(); } finally { killLeft(cacheDir); }
  }
});

test('swap group: the home starts with warmslot; a member whose process fails to start gives a clear 503, and the group returns home', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('swap-fail');
  const goodDir = `${path.join(cacheDir, 'slots', 'good')}\0`;
  const ws = await startWarmslot({
    backends: [
      { name: 'good', command: server(modelPath('llama')), lines: ['models: [good]'] },
      { name: 'bad', command: [llamaServerBin(), '-m', path.join(cacheDir, 'missing.gguf')], lines: ['models: [bad]'] },
    ],
    extra: `routing:\n  reconcile_interval: 100ms\ncache:\n  dir: ${cacheDir}\n` +
      'swap_groups:\n  - name: gpu\n    backends: [good, bad]\n    min_residency: 0s\n    home: good\n',
  });
  try {
    await waitFor('the home to start before any request', () => processesWith(goodDir).length === 1, 60000, 50);
    const ok = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi', { model: 'good' }));
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    for (let round = 0; round < 2; round++) {
      const r = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi', { model: 'bad' }));
      assert.equal(r.status, 503, JSON.stringify(r.body));
      assert.equal(r.headers.get('retry-after'), '5');
      assert.equal(r.body.error.code, 503);
      assert.equal(r.body.error.type, 'unavailable_error');
      assert.match(r.body.error.message, /^backend bad could not start: llama-server exited with code \d+ before it turned healthy/);
      await waitFor('the group to return to its home by itself', () => processesWith(goodDir).length === 1, 60000, 50);
      // The group recovers: the good member starts again and answers.
      const back = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi', { model: 'good' }));
      assert.equal(back.status, 200, JSON.stringify(back.body));
    }
    // An Anthropic client gets the error in its own shape.
    const m = await postJson(`${ws.url}/v1/messages`, { model: 'bad', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(m.status, 503);
    assert.equal(m.body.type, 'error');
    assert.match(m.body.error.message, /could not start/);
    assert.ok((await metric(ws.url, 'warmslot_swap_failed_starts_total')) >= 3);
  } finally {
    try { await ws.stop(); } finally { killLeft(cacheDir); }
  }
});

// A streamed answer that the client does not read: warmslot's relay blocks on the full socket,
// so the request stays in flight on its backend until the client goes (destroy()).
function heldStream(ws, model) {
  const body = JSON.stringify(chat('You are verbose.', 'Count to a million.', {
    model, stream: true, max_tokens: 15000, ignore_eos: true, logprobs: true, top_logprobs: 20 }));
  const req = http.request(`${ws.url}/v1/chat/completions`, { method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } });
  const started = new Promise((resolve, reject) => {
    req.on('response', (res) => { res.pause(); resolve(res.statusCode); });
    req.on('error', reject);
  });
  req.end(body);
  return { started, destroy: () => req.destroy() };
}

const members = async (ws) => Object.fromEntries((await getJson(`${ws.url}/warmslot/status`)).body
  .swaps.groups[0].members.map((m) => [m.backend, m]));

test('swap group: a client that leaves while it waits takes its place in the queue with it; nobody\'s model is started', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('swap-gone');
  const bDir = path.join(cacheDir, 'slots', 'b');
  const ws = await startWarmslot({
    backends: [
      { name: 'a', command: server(modelPath('llama')), lines: ['models: [model-a]'] },
      { name: 'b', command: server(runScript('tests/models/models.sh', ['llama', 'tiny', '2'])), lines: ['models: [model-b]'] },
    ],
    // A model that started keeps the group while it is used: b's waiter waits behind a's stream.
    extra: `cache:\n  dir: ${cacheDir}\nswap_groups:\n  - name: gpu\n    backends: [a, b]\n    min_residency: 10m\n`,
  });
  const watch = watchGroup([bDir]);
  let held;
  try {
    const first = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi', { model: 'model-a' }));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    held = heldStream(ws, 'model-a');
    assert.equal(await held.started, 200);

    const waiting = new AbortController();
    const forB = fetch(`${ws.url}/v1/chat/completions`, { method: 'POST', signal: waiting.signal,
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(chat('You are terse.', 'Hi', { model: 'model-b' })) }).catch((e) => e);
    await waitFor('a request waiting for b', async () => (await members(ws)).b.waiting === 1, 30000, 50);
    assert.equal((await members(ws)).b.state, 'stopped', 'a keeps the group while its stream runs');
    waiting.abort();
    assert.equal((await forB).name, 'AbortError');
    // Far below start_timeout (120 s), which is how long the waiter used to stay.
    await waitFor('the waiter to leave with its client', async () => (await members(ws)).b.waiting === 0, 30000, 50);

    held.destroy();
    await waitFor('a to be idle', async () => (await getJson(`${ws.url}/warmslot/status`)).body
      .backends.find((b) => b.name === 'a').in_flight === 0, 30000, 50);
    // a is idle now and nobody waits for b: the group keeps a.
    const again = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi again', { model: 'model-a' }));
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(again.headers.get('x-warmslot-backend'), 'a');
    const m = await members(ws);
    assert.deepEqual([m.a.state, m.b.state, m.b.waiting], ['running', 'stopped', 0]);
    assert.equal(await metric(ws.url, 'warmslot_swaps_total'), 0, 'no swap for a client that left');
    assert.equal(watch.stop().most, 0, 'b never had a process');
    assert.doesNotMatch(logText(ws), /backend b: starting in swap group/);
  } finally {
    held?.destroy();
    watch.stop();
    try { await ws.stop(); } finally { killLeft(cacheDir); }
  }
});

test('swap group with allow: a member that fits beside both runs beside either; a swap stops only the member outside the set', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('swap-allow');
  const dirs = Object.fromEntries(['a', 'b', 'e'].map((n) => [n, `${path.join(cacheDir, 'slots', n)}\0`]));
  const ws = await startWarmslot({
    backends: [
      { name: 'a', command: server(modelPath('llama')), lines: ['models: [model-a]'] },
      { name: 'b', command: server(runScript('tests/models/models.sh', ['llama', 'tiny', '2'])), lines: ['models: [model-b]'] },
      { name: 'e', command: server(runScript('tests/models/models.sh', ['llama', 'tiny', '3'])), lines: ['models: [model-e]'] },
    ],
    extra: `cache:\n  dir: ${cacheDir}\nswap_groups:\n  - name: gpu\n    backends: [a, b, e]\n` +
      '    allow: [[a, e], [b, e]]\n    min_residency: 0s\n',
  });
  const pairs = watchGroup([dirs.a.slice(0, -1), dirs.b.slice(0, -1)]);
  const ask = async (model) => {
    const r = await postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi', { model: `model-${model}` }));
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.headers.get('x-warmslot-backend'), model);
  };
  try {
    await ask('a');
    await ask('e');
    const ePid = processesWith(dirs.e);
    assert.equal(ePid.length, 1);
    assert.equal(processesWith(dirs.a).length, 1, 'e started beside a');
    assert.equal(await metric(ws.url, 'warmslot_swaps_total'), 0);
    await ask('b');
    assert.equal(await metric(ws.url, 'warmslot_swaps_total'), 1, 'only a was swapped out');
    assert.deepEqual(processesWith(dirs.e), ePid, 'e kept running beside b');
    assert.equal(processesWith(dirs.a).length, 0);
    await ask('e');
    await ask('a');
    assert.equal(await metric(ws.url, 'warmslot_swaps_total'), 2);
    assert.deepEqual(processesWith(dirs.e), ePid, 'e kept running beside a');
    const seen = pairs.stop();
    assert.equal(seen.most, 1, 'a and b never ran together');
    const status = (await getJson(`${ws.url}/warmslot/status`)).body.swaps.groups[0];
    assert.deepEqual(status.allow, [['a', 'e'], ['b', 'e']]);
  } finally {
    pairs.stop();
    try { await ws.stop(); } finally { killLeft(cacheDir); }
  }
});

test('swap group: a tenant that names models in turn is held to tenants.limits.swaps_per_minute; another tenant is not', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('swap-limit');
  const keyA = 'swap-limit-tenant-a-1';
  const keyB = 'swap-limit-tenant-b-1';
  const ws = await startWarmslot({
    backends: [
      { name: 'a', command: server(modelPath('llama')), lines: ['models: [model-a]'] },
      { name: 'b', command: server(runScript('tests/models/models.sh', ['llama', 'tiny', '2'])), lines: ['models: [model-b]'] },
    ],
    extra: `cache:\n  dir: ${cacheDir}\nswap_groups:\n  - name: gpu\n    backends: [a, b]\n    min_residency: 0s\n` +
      `api_keys:\n  - {key: ${keyA}, role: client, tenant: ta}\n  - {key: ${keyB}, role: client, tenant: tb}\n` +
      'tenants:\n  limits:\n    swaps_per_minute: 2\n',
  });
  const ask = (key, model) => postJson(`${ws.url}/v1/chat/completions`, chat('You are terse.', 'Hi', { model }),
    { authorization: `Bearer ${key}` });
  try {
    for (const model of ['model-a', 'model-b']) {  // two starts: the second drains a
      const r = await ask(keyA, model);
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    const third = await ask(keyA, 'model-a');
    assert.equal(third.status, 429, JSON.stringify(third.body));
    assert.equal(third.body.error.type, 'rate_limit_error');
    assert.match(third.body.error.message, /swaps_per_minute/);
    const wait = Number(third.headers.get('retry-after'));
    assert.ok(wait >= 1 && wait <= 60, `Retry-After ${wait}`);
    // Nothing was drained or started for it (b turns "running" at the supervisor's next tick
    // after its first answer, which may come first).
    const states = async () => Object.fromEntries((await getJson(`${ws.url}/warmslot/status`,
      { headers: { authorization: `Bearer ${keyA}` } })).body.swaps.groups[0].members.map((m) => [m.backend, m.state]));
    await waitFor('b to be listed running', async () => (await states()).b === 'running', 10000, 50);
    assert.deepEqual(await states(), { a: 'stopped', b: 'running' });
    // b's model, already running, still answers the same tenant; another tenant may swap.
    assert.equal((await ask(keyA, 'model-b')).status, 200);
    const other = await ask(keyB, 'model-a');
    assert.equal(other.status, 200, JSON.stringify(other.body));
  } finally {
    try { await ws.stop(); } finally { killLeft(cacheDir); }
  }
});

test('swap group: what a swap saves of a member\'s slots before it stops is charged to the tenant whose request made the swap', { timeout: 300000 }, async () => {
  const cacheDir = tempDir('swap-charge');
  const keyA = 'swap-charge-tenant-a-1';
  const keyB = 'swap-charge-tenant-b-1';
  const ws = await startWarmslot({
    backends: [
      { name: 'a', command: server(modelPath('llama')), lines: ['models: [model-a]'] },
      { name: 'b', command: server(runScript('tests/models/models.sh', ['llama', 'tiny', '2'])), lines: ['models: [model-b]'] },
    ],
    // Stable messages are saved on their second use: the first leaves a's slot unsaved, for the
    // save before the stop.
    extra: `routing:\n  reconcile_interval: 100ms\ncache:\n  dir: ${cacheDir}\n  min_prefix_tokens: 1024\n  snapshot_after_uses: 2\n` +
      'swap_groups:\n  - name: gpu\n    backends: [a, b]\n    min_residency: 0s\n' +
      `api_keys:\n  - {key: ${keyA}, role: client, tenant: ta}\n  - {key: ${keyB}, role: client, tenant: tb}\n`,
  });
  const ask = (key, model, system) => postJson(`${ws.url}/v1/chat/completions`, chat(system, 'Hi', { model }),
    { authorization: `Bearer ${key}` });
  const rows = () => execFileSync('sqlite3', ['-separator', ' ', path.join(cacheDir, 'slots', 'a', 'warmslot-index.sqlite'),
    'SELECT tenant, tokens FROM snapshots;'], { encoding: 'utf8' }).trim().split('\n').filter(Boolean)
    .map((l) => { const [tenant, tokens] = l.split(' '); return { tenant, tokens: Number(tokens) }; });
  try {
    const first = await ask(keyA, 'model-a', makeDocument(2501, 5000));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(first.headers.get('x-warmslot-disk') ?? '', '', 'nothing saved on the first use');
    const other = await ask(keyB, 'model-b', 'You are terse.');
    assert.equal(other.status, 200, JSON.stringify(other.body));
    await waitFor('a to have stopped after its save', () => /backend a: stopped llama-server/.test(logText(ws)), 30000, 50);
    const saved = rows();
    assert.equal(saved.length, 1, JSON.stringify(saved));
    assert.ok(saved[0].tokens > 1000);
    assert.equal(saved[0].tenant, 'tb', 'the tenant whose request drained a pays for its save');
  } finally {
    try { await ws.stop(); } finally { killLeft(cacheDir); }
  }
});
