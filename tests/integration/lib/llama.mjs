// The llama-server fixture: the pinned binary, generated models, and servers on loopback.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { freePort, repoRoot, runScript, startProcess, tempDir, waitFor } from './procs.mjs';

// The llama.cpp versions the tests know (tests/llama/pins): the first is the one every test
// runs (WARMSLOT_LLAMA_PIN names another: tests/run-all.sh runs the disk, rollback and priming
// tests again on each other pin); the ground truth runs on all of them.
export const llamaPins = fs.readFileSync(path.join(repoRoot, 'tests/llama/pins'), 'utf8')
  .split('\n').map((l) => l.trim()).filter(Boolean);
export const defaultPin = process.env.WARMSLOT_LLAMA_PIN || llamaPins[0];

const serverBins = new Map();
export function llamaServerBin(pin = defaultPin) {
  if (!serverBins.has(pin)) serverBins.set(pin, runScript('tests/llama/llama-server.sh', [], { LLAMA_PIN: pin }));
  return serverBins.get(pin);
}

// arch: 'llama' (plain attention), 'qwen35' (hybrid), 'gemma2' (sliding window).
export function modelPath(arch, preset = 'tiny') {
  return runScript('tests/models/models.sh', [arch, preset]);
}

// `url` may also be `unix:<socket path ending in .sock><target>`: a llama-server that warmslot
// started listens on such a socket (fetch cannot reach one).
export async function getJson(url, init) {
  const { status, headers, text } = url.startsWith('unix:') ? await unixFetch(url, init) : await (async () => {
    const res = await fetch(url, init);
    return { status: res.status, headers: res.headers, text: await res.text() };
  })();
  let body;
  try { body = JSON.parse(text); } catch { body = text; }
  return { status, headers, body };
}

function unixFetch(url, { method = 'GET', headers = {}, body } = {}) {
  const [, socketPath, target] = url.match(/^unix:(.*?\.sock)(\/.*)?$/);
  return new Promise((resolve, reject) => {
    const sized = body === undefined ? headers : { ...headers, 'content-length': Buffer.byteLength(body) };
    const req = http.request({ socketPath, method, path: target ?? '/', headers: sized }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: new Headers(Object.entries(res.headers).map(([k, v]) => [k, String(v)])), text }));
    });
    req.on('error', reject);
    req.setTimeout(30000, () => req.destroy(new Error(`no answer from ${url} within 30 s`)));
    req.end(body);
  });
}

export function postJson(url, body, headers = {}) {
  return getJson(url, {
    method: 'POST', headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

// Starts llama-server on a free loopback port and waits until /health answers 200.
// Flags default to what warmslot needs: explicit slots, metrics, a slot save directory.
// `port`: reuse a port (to restart a server where a proxy expects it).
// `pin`: the llama.cpp version (tests/llama/pins), the first one by default.
export async function startLlama({ arch = 'llama', model, slots = 2, ctx = 32768, extra = [],
  slotSaveDir, logDir, port: fixedPort, pin } = {}) {
  const modelFile = model ?? modelPath(arch);
  const saveDir = slotSaveDir ?? tempDir('slots');
  const dir = logDir ?? tempDir('llama');
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = fixedPort ?? await freePort();
    // slots 0: llama-server's own defaults for slots and context (no -np, no -c).
    const sizing = slots > 0 ? ['-np', String(slots), '-c', String(ctx * slots)] : [];
    const args = ['-m', modelFile, '--host', '127.0.0.1', '--port', String(port), ...sizing,
      '--metrics', '--slot-save-path', saveDir, '-t', '2', ...extra];
    const proc = startProcess(llamaServerBin(pin), args,
      { logFile: path.join(dir, `llama-${port}.log`) });
    const url = `http://127.0.0.1:${port}`;
    try {
      await waitFor(`llama-server on ${url}`, async () => {
        if (!proc.running) throw new Error(`llama-server exited, see ${proc.logFile}`);
        const r = await fetch(`${url}/health`).catch(() => null);
        return r?.status === 200;
      }, 120000);
      return { url, port, proc, saveDir, model: modelFile, args, arch, slots, ctx, extra, pin,
        stop: () => proc.stop() };
    } catch (e) {
      await proc.stop('SIGKILL');
      if (attempt === 2 || proc.running || fixedPort) throw e;
    }
  }
  throw new Error('unreachable');
}

// A llama-server in router mode: one child server per model, loaded on demand, at most
// `max` at once (--models-max). `models`: { id: arch }. The router passes its other flags
// (slots, context, slot directory, metrics) to every child.
export async function startRouter({ models, max = 1, slots = 2, ctx = 16384, extra = [], pin } = {}) {
  const saveDir = tempDir('slots');
  const dir = tempDir('router');
  const preset = path.join(dir, 'models.ini');
  fs.writeFileSync(preset, Object.entries(models)
    .map(([id, arch]) => `[${id}]\nmodel = ${modelPath(arch)}\n`).join('\n'));
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const args = ['--models-preset', preset, '--models-max', String(max), '--host', '127.0.0.1',
      '--port', String(port), '-np', String(slots), '-c', String(ctx * slots), '--metrics',
      '--slot-save-path', saveDir, '-t', '2', '--no-webui', ...extra];
    const proc = startProcess(llamaServerBin(pin), args, { logFile: path.join(dir, `router-${port}.log`) });
    const url = `http://127.0.0.1:${port}`;
    try {
      await waitFor(`llama-server router on ${url}`, async () => {
        if (!proc.running) throw new Error(`llama-server exited, see ${proc.logFile}`);
        const r = await fetch(`${url}/models`).catch(() => null);
        return r?.status === 200;
      }, 120000);
      return { url, port, proc, saveDir, args, stop: () => proc.stop() };
    } catch (e) {
      await proc.stop('SIGKILL');
      if (attempt === 2 || proc.running) throw e;
    }
  }
  throw new Error('unreachable');
}

// What a router says of each model: { id: 'loaded' | 'unloaded' | 'loading' | ... }.
export async function routerStatus(url) {
  const r = await getJson(`${url}/models`);
  return Object.fromEntries(r.body.data.map((m) => [m.id, m.status.value]));
}

// The same llama-server again on its port and save directory (its RAM state gone), as after a
// crash or an upgrade; the old one is stopped first.
export async function restartLlama(llama) {
  await llama.stop();
  return startLlama({ arch: llama.arch, slots: llama.slots, ctx: llama.ctx, extra: llama.extra,
    slotSaveDir: llama.saveDir, port: llama.port, pin: llama.pin });
}

// Tokens of a final user turn `q` and the assistant header after it (the generated models' chat
// template): what a request must compute at least when everything before it was cached.
export async function questionTokens(url, q, headers = {}) {
  const r = await postJson(`${url}/tokenize`, {
    content: `<|im_start|>user\n${q}<|im_end|>\n<|im_start|>assistant\n`, parse_special: true,
  }, headers);
  return r.body.tokens.length;
}

// Asserts that `answer` ({ processed }) computed no more than the question `q` and 64 tokens of
// slack: everything before it came from a cache.
export async function assertOnlyQuestionComputed(answer, url, q, what = '') {
  const bound = (await questionTokens(url, q)) + 64;
  assert.ok(answer.processed <= bound, `${what}processed ${answer.processed}, bound ${bound}`);
}

// The slot files warmslot wrote into a save directory (none when it does not exist yet).
export const snapshotFiles = (dir) =>
  (fs.existsSync(dir) ? fs.readdirSync(dir) : []).filter((f) => /^ws-.*\.bin$/.test(f));

// Prompt tokens the server computed for a chat or completion response.
export function promptStats(body) {
  const t = body.timings;
  if (!t) throw new Error(`response has no timings: ${JSON.stringify(body).slice(0, 300)}`);
  return { processed: t.prompt_n, cached: t.cache_n, total: t.prompt_n + t.cache_n };
}
