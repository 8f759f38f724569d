// A web page the user opens cannot make warmslot work: a request from another origin (Origin,
// Sec-Fetch-Site) is refused with 403 before its body is read, and every body read as JSON must
// say so in its Content-Type, keyless or not. Checked with plain HTTP requests, with the official
// SDKs (which must still work), and with a real headless Chromium running a page served from
// another loopback port. Real llama-server on a tiny model.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { getJson, startLlama } from './lib/llama.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { waitFor } from './lib/procs.mjs';
import { chat } from './lib/text.mjs';

const chromium = process.env.CHROMIUM ?? '/usr/bin/chromium';
const skipBrowser = process.env.WARMSLOT_SKIP_BROWSER === '1' && !fs.existsSync(chromium)
  ? 'WARMSLOT_SKIP_BROWSER=1 and no Chromium installed' : false;

async function setup(extra = '', apiKeys) {
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  let ws;
  try {
    ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra, apiKeys });
    // Once routing, warmslot's own probe of the slots has run: from then on llama-server's
    // prompt count moves only for requests.
    const headers = apiKeys ? { authorization: `Bearer ${apiKeys[0]}` } : {};
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`, { headers })).body.backends?.[0]?.routing, 60000);
  } catch (e) {
    if (ws) await ws.stop();
    await llama.stop();
    throw e;
  }
  return { llama, ws, stop: async () => { await ws.stop(); await llama.stop(); } };
}

const prompts = async (llama) => Number((await (await fetch(`${llama.url}/metrics`)).text())
  .match(/^llamacpp:prompt_tokens_total (\d+)/m)?.[1] ?? 0);

async function post(url, body, headers) {
  const res = await fetch(url, { method: 'POST', headers, body });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, body: json };
}

test('cross-site requests and bodies not declared as JSON are refused before they run; SDKs work', { timeout: 300000 }, async () => {
  const key = 'cross-site-client-key-01';
  const s = await setup('http:\n  cors_origins: ["https://app.example"]\n', [key]);
  try {
    const url = s.ws.url;
    const auth = { authorization: `Bearer ${key}` };
    const body = JSON.stringify(chat('You are terse.', 'Hi'));
    const json = { 'content-type': 'application/json', ...auth };
    const before = await prompts(s.llama);
    // What a foreign page's fetch() sends; with the key too (a page that stole it cannot use it).
    const evil = { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors' };
    for (const path of ['/v1/chat/completions', '/admin/snapshot']) {
      const r = await post(`${url}${path}`, body, { ...json, ...evil });
      assert.equal(r.status, 403, path);
      assert.equal(r.body.error.code, 403, path);
      assert.match(r.body.error.message, /cross-site/);
    }
    const messages = await post(`${url}/v1/messages`, JSON.stringify({ max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
      { ...json, origin: 'https://evil.example' });
    assert.equal(messages.status, 403);
    assert.equal(messages.body.type, 'error', 'the Anthropic shape on /v1/messages');
    assert.equal(messages.body.error.type, 'permission_error');
    // Sec-Fetch-Site alone, without an Origin; an Origin alone; "null" (a sandboxed frame).
    assert.equal((await post(`${url}/v1/chat/completions`, body, { ...json, 'sec-fetch-site': 'cross-site' })).status, 403);
    assert.equal((await post(`${url}/v1/chat/completions`, body, { ...json, origin: 'null' })).status, 403);
    assert.equal((await post(`${url}/v1/chat/completions`, body, { ...json, origin: `http://127.0.0.1:${s.ws.port + 1}` })).status, 403);
    assert.equal((await fetch(`${url}/v1/models`, { headers: { ...auth, ...evil } })).status, 403);
    // A body with no Content-Type at all (a fetch() of bytes sends none, and needs no preflight).
    const untyped = await post(`${url}/v1/chat/completions`, new TextEncoder().encode(body), auth);
    assert.equal(untyped.status, 415);
    assert.equal(untyped.body.error.code, 415);
    const untypedAdmin = await post(`${url}/admin/snapshot`, new TextEncoder().encode('{}'), auth);
    assert.equal(untypedAdmin.status, 415);
    assert.equal(await prompts(s.llama), before, 'a refused request reached llama-server');

    // Allowed: the listener's own origin, a listed origin, clients that are no browser.
    const own = await post(`${url}/v1/chat/completions`, body, { ...json, origin: url, 'sec-fetch-site': 'same-origin' });
    assert.equal(own.status, 200, JSON.stringify(own.body));
    const app = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { ...json, origin: 'https://app.example', 'sec-fetch-site': 'cross-site' }, body });
    assert.equal(app.status, 200);
    assert.equal(app.headers.get('access-control-allow-origin'), 'https://app.example');
    await app.arrayBuffer();
    // The official SDKs send application/json.
    const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
    const done = await openai.chat.completions.create({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 });
    assert.ok(done.choices[0].message);
    const anthropic = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0 });
    const msg = await anthropic.messages.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(msg.type, 'message');
  } finally {
    await s.stop();
  }
});

// A page served on another loopback port: `html` is its whole text.
function servePage(html) {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(html);
    });
    server.listen(0, '127.0.0.1', () => resolve({ port: server.address().port, close: () => new Promise((r) => server.close(r)) }));
  });
}

test('a page in a real browser, on another loopback port, cannot run a completion or an admin call', { timeout: 300000, skip: skipBrowser }, async () => {
  const s = await setup('');  // keyless: the default a user starts with
  let page;
  let browser;
  try {
    const url = s.ws.url;
    const before = await prompts(s.llama);
    // fetch() with an untyped body (bytes: no Content-Type, so no preflight), as the page of
    // any site the user opens could send it.
    const script = `
      const body = new TextEncoder().encode(${JSON.stringify(JSON.stringify(chat('You are terse.', 'Hi')))});
      window.results = Promise.all([
        fetch('${url}/v1/chat/completions', { method: 'POST', mode: 'no-cors', body }).then((r) => r.type, (e) => String(e)),
        fetch('${url}/admin/snapshot', { method: 'POST', mode: 'no-cors', body: new Uint8Array(0) }).then((r) => r.type, (e) => String(e)),
        fetch('${url}/v1/chat/completions', { method: 'POST', body }).then((r) => r.status, (e) => String(e)),
      ]);`;
    const foreign = await servePage(`<!doctype html><title>elsewhere</title><script>${script}</script>`);
    try {
      const { default: puppeteer } = await import('puppeteer-core');
      browser = await puppeteer.launch({
        executablePath: chromium, headless: true,
        args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
          '--disable-background-networking', '--disable-component-update', '--disable-sync',
          '--disable-default-apps', '--disable-extensions'],
      });
      page = await browser.newPage();
      // The same page from 127.0.0.1 (same site, another port) and from localhost (another site).
      for (const host of ['127.0.0.1', 'localhost']) {
        await page.goto(`http://${host}:${foreign.port}/`);
        const results = await page.evaluate(() => window.results);
        assert.equal(results.length, 3, JSON.stringify(results));
      }
    } finally {
      await foreign.close();
    }
    // What warmslot did with them: every one refused, none reached llama-server.
    const seen = await waitFor('the six requests in the request list', async () => {
      const r = await getJson(`${url}/warmslot/status`);
      const list = r.body.requests.filter((q) => q.path === '/v1/chat/completions' || q.path === '/admin/snapshot');
      return list.length >= 6 ? list : null;
    }, 20000, 100);
    assert.deepEqual(seen.map((q) => q.status), [403, 403, 403, 403, 403, 403], JSON.stringify(seen));
    assert.equal(await prompts(s.llama), before, 'a page\'s request reached llama-server');

    // warmslot's own dashboard page (same origin) still makes its calls.
    await page.goto(`${url}/warmslot/`);
    const own = await page.evaluate(async () => {
      const r = await fetch('/admin/snapshot', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      return r.status;
    });
    assert.equal(own, 200);
  } finally {
    if (browser) await browser.close();
    await s.stop();
  }
});
