// A config reload that adds a backend while requests wait to be planned. A request plans only on
// the backends of the config it arrived under: one added meanwhile is not in that list, and a
// plan on it would index past it. Real llama-server processes behind a loopback relay that keeps
// the first backend's check unanswered until the reload has landed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { startRelay } from './lib/relay.mjs';
import { startWarmslot, yamlConfig } from './lib/warmslot.mjs';
import { chat } from './lib/text.mjs';

// The debug line "a request waits for a check" shows when a request starts to wait.
process.env.WARMSLOT_TEST_LOG_LEVEL = 'debug';

const logText = (ws) => fs.readFileSync(ws.logFile, 'utf8');
const count = (text, needle) => text.split(needle).length - 1;
const modelName = (llama) => path.basename(llama.model).replace(/\.gguf$/, '');

async function reloadWith(ws, yaml) {
  const before = count(logText(ws), 'config reloaded');
  fs.writeFileSync(ws.configFile, yaml);
  ws.proc.child.kill('SIGHUP');
  await waitFor('the reload to be logged', () => count(logText(ws), 'config reloaded') > before, 10000);
}

function assertAnswer(r, what) {
  assert.equal(r.status, 200, `${what}: ${JSON.stringify(r.body)}`);
  assert.equal(typeof r.body.choices?.[0]?.message?.content, 'string', what);
  // ignore_eos: the answer is as long as asked, and every prompt token was reused or computed.
  assert.equal(r.body.usage.completion_tokens, 8, what);
  assert.equal(r.body.timings.cache_n + r.body.timings.prompt_n, r.body.usage.prompt_tokens, what);
}

test('requests waiting to be planned when a reload adds a backend complete on their own backend list', { timeout: 240000 }, async () => {
  // Two model files, so that "model" chooses the backend of the later requests.
  const [llamaA, llamaB] = await Promise.all([
    startLlama({ arch: 'llama', slots: 2, ctx: 4096 }),
    startLlama({ arch: 'qwen35', slots: 2, ctx: 4096 }),
  ]);
  // Backend a's first check (GET /props) gets no answer until release(): no backend is ready.
  const relay = await startRelay(() => llamaA.url, { hold: true });
  const a = { name: 'a', url: relay.url };
  const b = { name: 'b', url: llamaB.url };
  const extra = 'routing:\n  reconcile_interval: 200ms\n';
  let ws;
  try {
    ws = await startWarmslot({ backends: [a], extra });
    await waitFor('backend a\'s first check to be held', () => relay.held > 0, 10000);
    // More waiting requests than a has slots: a plan that took b would show on some of them.
    const bodies = [1, 2, 3].map((i) => chat(`You are assistant number ${i}.`, `Question ${i}?`,
      { max_tokens: 8, ignore_eos: true }));
    const pending = bodies.map((body) => postJson(`${ws.url}/v1/chat/completions`, body));
    await waitFor('the requests to wait for readiness',
      () => count(logText(ws), 'backend a: a request waits for a check') >= 3, 15000, 10);

    await reloadWith(ws, yamlConfig({ backends: [a, b], extra }));
    await waitFor('backend b to be routed', () => /backend b: cache-aware routing on/.test(logText(ws)), 30000);
    // Still waiting: nothing was answered, a's check is still held.
    assert.equal(count(logText(ws), 'POST /v1/chat/completions'), 0, 'no request ended before the release');
    assert.equal(relay.hold, true);

    relay.release();
    const answers = await Promise.all(pending);
    answers.forEach((r, i) => {
      assertAnswer(r, `waiting request ${i}`);
      assert.equal(r.headers.get('x-warmslot-backend'), 'a', `waiting request ${i} runs on its own config's backend`);
    });
    // An access line is written once its answer is sent: the client may read the answer first.
    const answered = () => logText(ws).split('\n').filter((l) => l.includes('POST /v1/chat/completions 200'));
    await waitFor('the three access lines', () => answered().length >= 3, 5000, 10).catch(() => {});
    const lines = answered();
    assert.equal(lines.length, 3, lines.join('\n'));
    for (const l of lines) assert.match(l, /waited="readiness \d+ms"/, l);

    // Later requests run under the new config, on both backends.
    for (const [llama, name] of [[llamaA, 'a'], [llamaB, 'b'], [llamaA, 'a'], [llamaB, 'b']]) {
      const r = await postJson(`${ws.url}/v1/chat/completions`,
        chat('You are brief.', `Which backend is ${name}?`, { model: modelName(llama), max_tokens: 8, ignore_eos: true }));
      assertAnswer(r, `later request for ${name}`);
      assert.equal(r.headers.get('x-warmslot-backend'), name);
    }
    assert.ok(ws.proc.running, 'warmslot is still up');
  } finally {
    await ws?.stop();
    await relay.stop();
    await llamaA.stop();
    await llamaB.stop();
  }
});
