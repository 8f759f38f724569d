// deploy/cluster/cluster.sh from tests and the cluster benchmark: starts it, reads what it printed,
// reads each host's llama-server counters from inside the host's namespace, asks HAProxy which
// hosts it sees up, and sends streamed requests whose failures are recorded, not thrown.
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { repoRoot } from './procs.mjs';
import { readSse } from './warmslot.mjs';
import { chat } from './text.mjs';

const script = path.join(repoRoot, 'deploy/cluster/cluster.sh');

// Starts the cluster script and waits for its "ready" line. `args`: the script's arguments.
// Returns { info, pid, logFile, stop() }. stop() sends SIGTERM and waits until the script has removed
// its namespaces and processes (it exits only then). The script also stops by itself when this
// process is gone, and it gets SIGINT with it from a terminal.
export async function startCluster(args, { logFile, timeoutMs = 300000 } = {}) {
  const err = fs.openSync(logFile, 'a');
  const child = spawn('bash', [script, ...args], { stdio: ['ignore', 'pipe', err] });
  fs.closeSync(err);
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    const t = setTimeout(() => child.kill('SIGKILL'), 60000);
    const r = await exited;
    clearTimeout(t);
    return r;
  };
  let out = '';
  try {
    const info = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`cluster not ready within ${timeoutMs} ms, see ${logFile}`)), timeoutMs);
      child.stdout.on('data', (chunk) => {
        out += chunk;
        const m = out.match(/^ready (.*)$/m);
        if (m) { clearTimeout(timer); resolve(JSON.parse(m[1])); }
      });
      exited.then((r) => { clearTimeout(timer); reject(new Error(`cluster.sh exited (${JSON.stringify(r)}), see ${logFile}`)); });
    });
    return { info, pid: child.pid, logFile, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

function runIn(ns, cmd, args) {
  return new Promise((resolve, reject) => {
    execFile('ip', ['netns', 'exec', ns, cmd, ...args], { timeout: 10000, encoding: 'utf8' },
      (e, stdout) => (e ? reject(e) : resolve(stdout)));
  });
}

// A host's llama-server `llamacpp:prompt_tokens_total`, read inside the host's namespace (its
// llama-server listens on the host's own loopback only).
export async function hostPromptTokens(host) {
  const text = await runIn(host.ns, 'curl', ['-sf', '--max-time', '5', `${host.llama}/metrics`]);
  const line = text.split('\n').find((l) => l.startsWith('llamacpp:prompt_tokens_total'));
  if (!line) throw new Error(`${host.name}: no llamacpp:prompt_tokens_total`);
  return Number(line.trim().split(/\s+/).at(-1));
}

// How many tokens `text` is for a host's llama-server (POST /tokenize inside its namespace).
export async function hostTokenCount(host, text) {
  const out = await runIn(host.ns, 'curl', ['-sf', '--max-time', '5', '-H', 'content-type: application/json',
    '-d', JSON.stringify({ content: text }), `${host.llama}/tokenize`]);
  return JSON.parse(out).tokens.length;
}

// HAProxy's view of each host from its CSV stats: { h1: 'UP', h2: 'DOWN', ..., backend:
// { retries, redispatches } }.
export async function balancerStatus(info) {
  const text = await (await fetch(info.stats)).text();
  const out = { backend: { retries: 0, redispatches: 0 } };
  for (const line of text.split('\n')) {
    const f = line.split(',');
    if (f[0] !== 'warmslot_hosts') continue;
    if (/^h\d+$/.test(f[1])) out[f[1]] = f[17];
    if (f[1] === 'BACKEND') out.backend = { retries: Number(f[15]), redispatches: Number(f[16]) };
  }
  return out;
}

// Until HAProxy counts no request in flight on any host (its CSV `scur`), at most `ms`: its
// bounded load (hash-balance-factor) sends a key to the next host while the previous answer's
// session is still counted on its own, so an affinity check waits for that first.
export async function balancerIdle(info, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    const text = await (await fetch(info.stats)).text();
    const busy = text.split('\n').map((l) => l.split(','))
      .filter((f) => f[0] === 'warmslot_hosts' && /^h\d+$/.test(f[1])).some((f) => Number(f[4]) > 0);
    if (!busy || Date.now() > end) return !busy;
    await new Promise((r) => setTimeout(r, 50));
  }
}

// One streamed chat request. Never throws for what the server did: returns { status, host, ok,
// error (an SSE error event or the HTTP error body), events, timings, ttft, total, sentAt }.
// `onEvent(n)` is called at every SSE data event with the count so far.
export async function streamOnce(url, request, extra = {}, onEvent = null) {
  const body = JSON.stringify(chat(request.system, request.question, { stream: true, ...extra }));
  const sentAt = performance.now();
  const out = { status: 0, host: null, ok: false, error: null, events: 0, timings: null, done: false,
    ttft: null, total: null, sentAt };
  try {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body,
    });
    out.status = res.status;
    out.host = res.headers.get('x-cluster-host');
    out.disk = res.headers.get('x-warmslot-disk') ?? '';
    // Prompt tokens warmslot had llama-server compute for this request before it ran (priming
    // the prefix for a snapshot): not in the answer's own timings.
    out.primed = Number(res.headers.get('x-warmslot-primed-tokens') ?? 0);
    if (res.status !== 200) {
      out.error = (await res.text()).slice(0, 300);
    } else {
      await readSse(res, (data) => {
        onEvent?.(++out.events);
        if (data === '[DONE]') { out.done = true; return; }
        const ev = JSON.parse(data);
        if (ev.error) { out.error = JSON.stringify(ev.error).slice(0, 300); return; }
        const delta = ev.choices?.[0]?.delta;
        if (out.ttft === null && (delta?.content || delta?.reasoning_content)) out.ttft = performance.now() - sentAt;
        if (ev.timings) out.timings = ev.timings;
      });
    }
  } catch (e) {
    out.error = out.error ?? `connection: ${e.cause?.code ?? e.message}`;
  }
  out.total = performance.now() - sentAt;
  out.ok = out.status === 200 && !out.error && out.done && out.timings !== null;
  return out;
}
