// Requests a service meets: bodies built to exhaust the stack, a burst of streams followed by
// more requests on the connections the burst left behind, and a backend whose /props answer has
// fields of the wrong type (a relay rewrites a real llama-server's answer: no real server sends
// one on demand).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { readSse, startWarmslot } from './lib/warmslot.mjs';
import { chat } from './lib/text.mjs';

test('a body of a million nested brackets is refused (401 without a key, 400 with one) and warmslot lives on', { timeout: 120000 }, async () => {
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  const key = 'robust-test-key-0123';
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], apiKeys: [key],
    extra: 'limits:\n  max_body_bytes: 4MiB\n' });
  try {
    const deep = `{"messages":[{"role":"user","content":"hi"}],"x":${'['.repeat(1_000_000)}${']'.repeat(1_000_000)}}`;
    for (const path of ['/v1/chat/completions', '/v1/messages', '/v1/responses']) {
      const anonymous = await fetch(`${ws.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: deep });
      assert.equal(anonymous.status, 401, path);
      await anonymous.text();
      const keyed = await fetch(`${ws.url}${path}`, { method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` }, body: deep });
      assert.equal(keyed.status, 400, path);
      const body = await keyed.json();
      assert.match(JSON.stringify(body), /deeper than 128 levels/, path);
    }
    const ok = await postJson(`${ws.url}/v1/chat/completions`, chat('You are brief.', 'Hi'), { authorization: `Bearer ${key}` });
    assert.equal(ok.status, 200);
  } finally {
    await ws.stop();  // fails the test if warmslot died
    await llama.stop();
  }
});

test('a burst of 64 streams on a 4-slot server, then 20 requests one after another: no 5xx', { timeout: 300000 }, async () => {
  const llama = await startLlama({ slots: 4, ctx: 4096 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }] });
  try {
    const stream = async (i) => {
      const res = await fetch(`${ws.url}/v1/chat/completions`, { method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(chat(`You are assistant number ${i}.`, `Say something about ${i}.`, { stream: true, max_tokens: 8 })) });
      let error = null;
      if (res.status === 200) {
        await readSse(res, (data) => { if (data !== '[DONE]' && JSON.parse(data).error) error = data; });
      } else {
        error = `${res.status} ${await res.text()}`;
      }
      return error;
    };
    const burst = await Promise.all(Array.from({ length: 64 }, (_, i) => stream(i)));
    assert.deepEqual(burst.filter(Boolean), [], 'every stream of the burst answered');
    for (let i = 0; i < 20; i++) {
      const r = await postJson(`${ws.url}/v1/chat/completions`, chat('You are brief.', `Question ${i}?`, { max_tokens: 4 }));
      assert.equal(r.status, 200, `request ${i} after the burst: ${JSON.stringify(r.body)}`);
    }
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

// Passes everything to `target` unchanged, except /props while `corrupt` is set: then
// total_slots is a string and n_ctx an object.
function propsRelay(target) {
  const relay = { corrupt: true, corrupted: 0 };
  const server = http.createServer((req, res) => {
    const up = http.request(`${target}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
      if (!(relay.corrupt && req.url.startsWith('/props'))) {
        res.writeHead(r.statusCode, r.headers);
        r.pipe(res);
        return;
      }
      const parts = [];
      r.on('data', (d) => parts.push(d));
      r.on('end', () => {
        const props = JSON.parse(Buffer.concat(parts).toString('utf8'));
        props.total_slots = String(props.total_slots);
        if (props.default_generation_settings) props.default_generation_settings.n_ctx = { n: 1 };
        relay.corrupted++;
        const body = JSON.stringify(props);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
    relay.url = `http://127.0.0.1:${server.address().port}`;
    relay.stop = () => new Promise((done) => { server.closeAllConnections(); server.close(() => done()); });
    resolve(relay);
  }));
}

test('a /props answer with fields of the wrong type is logged, and the backend is routed once its answers are right again', { timeout: 120000 }, async () => {
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  const relay = await propsRelay(llama.url);
  const ws = await startWarmslot({ backends: [{ name: 'b', url: relay.url }], extra: 'routing:\n  reconcile_interval: 100ms\n' });
  try {
    await waitFor('warmslot to read the wrong /props twice', () => relay.corrupted >= 2, 30000, 20);
    const health = await getJson(`${ws.url}/health`);
    assert.ok(!health.body.backends?.[0]?.routing, `no routing on a backend it cannot read: ${JSON.stringify(health.body)}`);
    // Requests are still served (unpinned) meanwhile.
    const r = await postJson(`${ws.url}/v1/chat/completions`, chat('You are brief.', 'Hi?', { max_tokens: 4 }));
    assert.equal(r.status, 200, JSON.stringify(r.body));
    relay.corrupt = false;
    await waitFor('routing once /props reads right', async () =>
      (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    assert.match(fs.readFileSync(ws.logFile, 'utf8'), /props/i, 'the bad answer is logged');
  } finally {
    await ws.stop();
    await relay.stop();
    await llama.stop();
  }
});

// A stop that comes while the start-up probe or a backend check is still under way: the work cut
// short is destroyed while what it refers to is alive (it once reached a destroyed registry and
// crashed, about one stop in 40). Each stop lands at another moment of the start.
test('warmslot stopped at any moment of its start exits cleanly, 30 times', { timeout: 180000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  try {
    for (let i = 0; i < 30; i++) {
      const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }] });
      await new Promise((r) => setTimeout(r, (i * 37) % 150));
      await ws.stop();  // throws unless the exit is clean (code 0)
    }
  } finally {
    await llama.stop();
  }
});
