// Streams through warmslot are never silent longer than its keep-alive interval, also while
// warmslot itself works before the backend answers: here it primes and saves a new document on
// a real llama-server slowed by a SIGSTOP/SIGCONT duty cycle, so the priming alone takes longer
// than the client's read timeout. The client (no byte for READ_TIMEOUT_MS = failure) gets the
// stream's head, keep-alive events, then llama-server's answer through the same response: the
// answer llama-server alone gives.
//
// Sizes: KEEPALIVE_DOC_BYTES (default 32000: the priming holds the stream over 60 s on two cores;
// 24000 held it about 50 s) and KEEPALIVE_DUTY (run milliseconds of every 500, default 40).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { eraseSlots } from './lib/answers.mjs';
import { dutyCycle, sleep, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { makeDocument } from './lib/text.mjs';
import { startRelay } from './lib/relay.mjs';

const docBytes = Number(process.env.KEEPALIVE_DOC_BYTES ?? 32000);
const runMs = Number(process.env.KEEPALIVE_DUTY ?? 40);
const periodMs = 500;
const readTimeoutMs = 20000;
const keepaliveMs = 3000;
const slackMs = 2000;
// save_after_answer off: a streamed Chat Completions request on the plain model is primed and
// saved before it runs, as on a hybrid model, which is the work these tests hold a stream for.
const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n  save_after_answer: false\n' +
  `timeouts:\n  stream_keepalive: ${keepaliveMs}ms\n`;

// A streaming POST whose every byte is timed: fails when nothing arrives for `timeoutMs`.
// Straight requests to llama-server go on a connection of their own: llama-server closes its
// side after an answer sent in chunks, and node's keep-alive agent could reuse that connection
// just as it closes. Requests to warmslot go over node's keep-alive agent as a client's would.
// An error names the request it ended.
// `maxGap` is the longest silence of the whole answer, `heldGap` the longest before the first
// event that is not a keep-alive (while warmslot holds the request; after it, silence is the
// backend's own).
function timedStream(base, path, body, timeoutMs = readTimeoutMs, { straight = false } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(path, base);
    const start = Date.now();
    let last = start;
    let maxGap = 0;
    let heldGap = 0;
    let answering = false;
    let headersAt = 0;
    let answeredAt = 0;  // the first event that is not a keep-alive
    let raw = '';
    const seen = () => {
      const now = Date.now();
      maxGap = Math.max(maxGap, now - last);
      if (!answering) heldGap = Math.max(heldGap, now - last);
      last = now;
    };
    const fail = (e) => reject(Object.assign(new Error(`${base}${path} after ${Date.now() - start} ms: ${e.message}`),
      { code: e.code }));
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST',
      agent: straight ? false : undefined, headers: { 'content-type': 'application/json' } }, (res) => {
      seen();
      headersAt = Date.now() - start;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        seen();
        raw += d;
        answering ||= parseSse(raw).events.some((e) => !/"type": ?"ping"/.test(e.data));
      if (answering && !answeredAt) answeredAt = Date.now() - start;
      });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers,
        trailers: res.trailers, raw, maxGap, heldGap, headersAt, answeredAt, total: Date.now() - start }));
      res.on('error', fail);
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no byte for ${timeoutMs} ms`)));
    req.on('error', fail);
    req.end(JSON.stringify(body));
  });
}

// The events of an SSE text: [{ event, data }], comments left out but counted.
function parseSse(raw) {
  const events = [];
  let comments = 0;
  for (const block of raw.split('\n\n')) {
    if (!block.trim()) continue;
    const lines = block.split('\n');
    if (lines.every((l) => l.startsWith(':'))) { comments++; continue; }
    const event = lines.find((l) => l.startsWith('event:'))?.slice(6).trim() ?? '';
    const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
    events.push({ event, data });
  }
  return { events, comments };
}

// The answer text of a Chat Completions or Messages stream, and the pings it carried.
function answerOf(raw, api) {
  const { events, comments } = parseSse(raw);
  let text = '';
  let pings = comments;
  for (const e of events) {
    if (e.data === '[DONE]') continue;
    const j = JSON.parse(e.data);
    assert.ok(!j.error && j.type !== 'error', `error event in the stream: ${e.data}`);
    if (api === 'chat') text += j.choices?.[0]?.delta?.content ?? '';
    if (api === 'messages' && j.type === 'content_block_delta') text += j.delta?.text ?? '';
    if (api === 'messages' && j.type === 'ping') pings++;
  }
  return { text, pings };
}

const cases = [
  { api: 'chat', path: '/v1/chat/completions', seed: 4001,
    body: (doc, q) => ({ messages: [{ role: 'system', content: doc }, { role: 'user', content: q }],
      max_tokens: 16, temperature: 0, seed: 42, stream: true }) },
  { api: 'messages', path: '/v1/messages', seed: 4002,
    body: (doc, q) => ({ model: 'tiny', system: doc, messages: [{ role: 'user', content: q }],
      max_tokens: 16, temperature: 0, stream: true }) },
];

test('a stream held while warmslot primes a long document gets keep-alive and the straight answer', { timeout: 900000 }, async (t) => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 + docBytes * 2 });
  let ws;
  let stopCycle = null;
  try {
    const question = 'What does the last line of the document say?';
    const docs = cases.map((c) => makeDocument(c.seed, docBytes));
    // What llama-server alone answers, computed from scratch before warmslot starts.
    const want = [];
    for (const [i, c] of cases.entries()) {
      await eraseSlots(llama.url, llama.slots);
      const r = await timedStream(llama.url, c.path, c.body(docs[i], question), 600000, { straight: true });
      assert.equal(r.status, 200, r.raw.slice(0, 300));
      want.push(answerOf(r.raw, c.api).text);
    }
    await eraseSlots(llama.url, llama.slots);
    ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    for (const [i, c] of cases.entries()) {
      stopCycle = dutyCycle(llama.proc.child.pid, runMs, periodMs);
      let r;
      try {
        r = await timedStream(ws.url, c.path, c.body(docs[i], question));
      } finally {
        await stopCycle();
        stopCycle = null;
      }
      const primed = Number(r.headers['x-warmslot-primed-tokens'] ?? r.trailers['x-warmslot-primed-tokens'] ?? 0);
      const got = answerOf(r.raw, c.api);
      t.diagnostic(`${c.api}: ${docBytes} bytes, primed ${primed} tokens; head after ${r.headersAt} ms, ` +
        `first answer event after ${r.answeredAt} ms, end after ${r.total} ms, longest silence ${r.heldGap} ms while held (${r.maxGap} ms in all), ` +
        `${got.pings} keep-alive events; ` +
        `disk ${r.headers['x-warmslot-disk'] ?? r.trailers['x-warmslot-disk'] ?? '-'}`);
      assert.equal(r.status, 200);
      assert.match(r.headers['content-type'], /^text\/event-stream/);
      assert.ok(primed > 1024, `${c.api}: warmslot primed the document (primed ${primed})`);
      assert.ok(r.answeredAt > readTimeoutMs,
        `${c.api}: warmslot held the stream ${r.answeredAt} ms, not longer than the read timeout: raise KEEPALIVE_DOC_BYTES`);
      assert.ok(got.pings >= Math.floor(readTimeoutMs / keepaliveMs) - 1, `${c.api}: ${got.pings} keep-alive events`);
      assert.ok(r.heldGap < keepaliveMs + slackMs, `${c.api}: longest silence while held ${r.heldGap} ms`);
      assert.equal(got.text, want[i], `${c.api}: the answer through warmslot is llama-server's own`);
    }
  } finally {
    if (stopCycle) await stopCycle();
    if (ws) await ws.stop();
    await llama.stop();
  }
});

// After the head went out, a refusal can no longer be an HTTP status: llama-server's 400 for a
// prompt longer than the slot (the document alone fits, and warmslot primes it first) reaches
// the client as one error event in its API's shape, and the stream ends.
test('a refusal after the early head is one error event in the API\'s shape', { timeout: 600000 }, async (t) => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  let ws;
  let stopCycle = null;
  try {
    ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const question = `Compare these notes with the document:\n${makeDocument(4100, 3000)}`;
    for (const [i, c] of cases.entries()) {
      const doc = makeDocument(4200 + i, 7000);  // primed for about 15 s
      stopCycle = dutyCycle(llama.proc.child.pid, runMs, periodMs);
      let r;
      try {
        r = await timedStream(ws.url, c.path, c.body(doc, question));
      } finally {
        await stopCycle();
        stopCycle = null;
      }
      const { events, comments } = parseSse(r.raw);
      t.diagnostic(`${c.api}: head after ${r.headersAt} ms, end after ${r.total} ms, ${comments} comments, ` +
        `events ${JSON.stringify(events).slice(0, 400)}`);
      assert.equal(r.status, 200, 'the head went out before the refusal');
      assert.ok(r.headersAt >= keepaliveMs - 500, `the head waited for the interval (${r.headersAt} ms)`);
      const last = events.at(-1);
      assert.ok(last, 'the stream carries the error');
      const body = JSON.parse(last.data);
      if (c.api === 'chat') {
        assert.equal(last.event, '');
        assert.equal(body.error.code, 400);
        assert.equal(body.error.type, 'exceed_context_size_error');
      } else {
        assert.equal(last.event, 'error');
        assert.equal(body.type, 'error');
        assert.equal(body.error.type, 'invalid_request_error');
        assert.ok(body.error.message.length > 0);
      }
      assert.ok(r.maxGap < keepaliveMs + slackMs, `${c.api}: longest silence ${r.maxGap} ms`);
    }
  } finally {
    if (stopCycle) await stopCycle();
    if (ws) await ws.stop();
    await llama.stop();
  }
});

// llama-server sends no head for a request that waits in its own queue; the stream warmslot
// holds meanwhile gets the keep-alive too (here a loopback relay holds the request as that queue
// would), and a request's own sse_ping_interval makes the interval shorter.
test('a stream waiting for the backend\'s head gets keep-alive; sse_ping_interval shortens it', { timeout: 300000 }, async (t) => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 4096 });
  const relay = await startRelay(() => llama.url);
  let ws;
  try {
    ws = await startWarmslot({ backends: [{ name: 'b', url: relay.url }], extra: settings });
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const chat = { messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 8, temperature: 0,
      stream: true };
    const runs = [
      { what: 'chat', path: '/v1/chat/completions', body: chat, every: keepaliveMs },
      { what: 'chat with sse_ping_interval 1', path: '/v1/chat/completions', body: { ...chat, sse_ping_interval: 1 }, every: 1000 },
      { what: 'responses', path: '/v1/responses',
        body: { model: 'tiny', input: 'Say something.', max_output_tokens: 8, temperature: 0, stream: true }, every: keepaliveMs },
    ];
    const holdMs = 8000;
    for (const run of runs) {
      const want = await timedStream(llama.url, run.path, run.body, 60000, { straight: true });
      relay.holdOnly = new RegExp(`^${run.path.replace(/\//g, '\\/')}`);
      const pending = timedStream(ws.url, run.path, run.body);
      await waitFor('the request held', () => relay.heldPaths.some((p) => p.includes(run.path)), 30000);
      await sleep(holdMs);
      await relay.release();
      relay.heldPaths.length = 0;
      const r = await pending;
      const { events, comments } = parseSse(r.raw);
      t.diagnostic(`${run.what}: head after ${r.headersAt} ms, longest silence ${r.maxGap} ms, ${comments} comments`);
      assert.equal(r.status, 200);
      assert.ok(r.headersAt <= run.every + slackMs, `${run.what}: head after ${r.headersAt} ms`);
      assert.ok(comments >= Math.floor(holdMs / run.every) - 1, `${run.what}: ${comments} keep-alive comments`);
      assert.ok(r.maxGap < run.every + slackMs, `${run.what}: longest silence ${r.maxGap} ms`);
      // The backend's events follow in the same response: the answer llama-server gives.
      const text = (raw) => parseSse(raw).events.map((e) => {
        if (e.data === '[DONE]') return '';
        const j = JSON.parse(e.data);
        return j.choices?.[0]?.delta?.content ?? (j.type === 'response.output_text.delta' ? j.delta : '');
      }).join('');
      assert.ok(events.length > 2, `${run.what}: the backend's events came through`);
      assert.ok(text(want.raw).length > 0, `${run.what}: straight answer has text`);
      assert.equal(text(r.raw), text(want.raw), `${run.what}: the answer through warmslot is llama-server's own`);
    }
  } finally {
    if (ws) await ws.stop();
    await relay.stop();
    await llama.stop();
  }
});

// A client that sets return_progress gets llama-server's prompt_progress events; through
// warmslot, the priming of a new document comes first in the same shape, so the client sees one
// count of one total rise from the priming through llama-server's own prefill, and the answer
// llama-server alone gives.
test('prompt progress: warmslot\'s priming is the start of one rising count, then llama-server\'s own', { timeout: 300000 }, async (t) => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 + 24000 * 2 });
  let ws;
  try {
    const doc = makeDocument(2911, 24000);
    const body = { messages: [{ role: 'system', content: doc }, { role: 'user', content: 'What does the first line say?' }],
      max_tokens: 8, temperature: 0, stream: true, return_progress: true };
    const progressOf = (raw) => parseSse(raw).events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data))
      .filter((j) => j.prompt_progress).map((j) => ({ ...j.prompt_progress, llama: 'system_fingerprint' in j }));
    const textOf = (raw) => parseSse(raw).events.filter((e) => e.data !== '[DONE]')
      .map((e) => JSON.parse(e.data).choices?.[0]?.delta?.content ?? '').join('');
    await eraseSlots(llama.url, llama.slots);
    const straight = await timedStream(llama.url, '/v1/chat/completions', body, 600000, { straight: true });
    assert.equal(straight.status, 200, straight.raw.slice(0, 300));
    const straightProgress = progressOf(straight.raw);
    assert.ok(straightProgress.length >= 2, `llama-server alone sends progress: ${JSON.stringify(straightProgress)}`);
    await eraseSlots(llama.url, llama.slots);
    ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }], extra: settings });
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const r = await timedStream(ws.url, '/v1/chat/completions', body);
    assert.equal(r.status, 200, r.raw.slice(0, 300));
    const primed = Number(r.headers['x-warmslot-primed-tokens'] ?? r.trailers['x-warmslot-primed-tokens'] ?? 0);
    const progress = progressOf(r.raw);
    const own = progress.filter((p) => !p.llama);
    t.diagnostic(`primed ${primed} tokens; head after ${r.headersAt} ms; progress through warmslot ` +
      `${JSON.stringify(progress.map((p) => `${p.llama ? 'llama' : 'warmslot'} ${p.processed}/${p.total}`))}; ` +
      `straight ${JSON.stringify(straightProgress.map((p) => `${p.processed}/${p.total}`))}`);
    assert.ok(primed > 1024, `warmslot primed the document (primed ${primed})`);
    assert.ok(own.length >= 2 && own.at(-1).processed > own[0].processed,
      `warmslot's priming shows rising progress: ${JSON.stringify(own)}`);
    assert.ok(progress.some((p) => p.llama), 'llama-server\'s own progress follows');
    const total = straightProgress.at(-1).total;
    for (const [i, p] of progress.entries()) {
      assert.equal(p.total, total, `every event has the prompt's total (${total}): ${JSON.stringify(p)}`);
      if (i > 0) assert.ok(p.processed >= progress[i - 1].processed, `the count never falls: ${JSON.stringify(progress)}`);
    }
    assert.equal(progress.at(-1).processed, total);
    assert.equal(textOf(r.raw), textOf(straight.raw), 'the answer through warmslot is llama-server\'s own');
  } finally {
    if (ws) await ws.stop();
    await llama.stop();
  }
});
