// The trace replay's runner: users replayed concurrently against one llama-server (alone or
// behind warmslot), an optional llama-server restart halfway, the lower bound of the prompts,
// and per configuration the tokens computed, TTFT, errors and warmslot's excess per route.
import fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import { getJson, postJson, restartLlama, startLlama } from '../../integration/lib/llama.mjs';
import { sleep, waitFor } from '../../integration/lib/procs.mjs';
import { readSse, startWarmslot } from '../../integration/lib/warmslot.mjs';
import { percentile, promptTokensTotal } from './client.mjs';
import { agentPreset } from './agent.mjs';
import { renderTexts, renderedMessages, requestBody } from './trace-workload.mjs';

// The configurations, side by side at the same memory (-c): `slots` is N of -np N.
export const traceConfigs = {
  defaults: { label: 'llama-server alone, defaults (no -np: auto slots, unified KV, --cache-ram)', defaults: true },
  np: { label: 'llama-server alone, -np N' },
  ws: { label: 'warmslot (default config) + -np N', warmslot: true },
  'ws-rules': { label: 'warmslot (coding-agent rules) + -np N', warmslot: true, extra: agentPreset },
  'ws-unified': { label: 'warmslot (default config) + -np N --kv-unified --no-cache-idle-slots', warmslot: true,
    flags: ['--kv-unified', '--no-cache-idle-slots'] },
  'ws-defaults': { label: 'warmslot (default config) + llama-server defaults', warmslot: true, defaults: true },
};

// Every request's steps in the order a user sends them (for the lower bound).
function* walk(user, sess, agent) {
  for (const [i, step] of sess.steps.entries()) {
    if (step.ids) yield { key: `${user.id}/${agent}/${i}`, user, step };
    else for (const sub of step.group) yield* walk(user, sub, `${agent}>${sub.name}`);
  }
}
export const allSteps = (w) => w.users.flatMap((u) => [...walk(u, u.main, 'main')]);

async function tokens(url, messages) {
  const t = await postJson(`${url}/apply-template`, { messages, add_generation_prompt: true });
  if (t.status !== 200) throw new Error(`apply-template: ${t.status} ${JSON.stringify(t.body).slice(0, 300)}`);
  const k = await postJson(`${url}/tokenize`, { content: t.body.prompt, add_special: true, parse_special: true });
  if (k.status !== 200) throw new Error(`tokenize: ${k.status}`);
  return k.body.tokens;
}

// The rendered tokens of every request (`/apply-template` + `/tokenize`, as completions
// tokenize): { key -> tokens }.
export async function renderAll(url, w, api) {
  const out = new Map();
  for (const { key, user, step } of allSteps(w)) out.set(key, await tokens(url, renderedMessages(api, renderTexts(user, step))));
  return out;
}

// A token trie: insert() returns how many of the tokens were new (at least 1: a request always
// computes one token). Summed over requests: every distinct prefix counted once.
export function prefixCounter() {
  const root = new Map();
  return (toks) => {
    let node = root;
    let i = 0;
    while (i < toks.length && node.has(toks[i])) node = node.get(toks[i++]);
    const fresh = toks.length - i;
    for (; i < toks.length; i++) { const n = new Map(); node.set(toks[i], n); node = n; }
    return Math.max(1, fresh);
  };
}

export function lowerBoundOf(rendered) {
  const add = prefixCounter();
  let total = 0;
  for (const t of rendered.values()) total += add(t);
  return total;
}

// One streamed request; never throws: a failure is recorded as the request's error.
async function send(url, api, body, timeoutMs) {
  const path = api === 'messages' ? '/v1/messages' : '/v1/chat/completions';
  const t0 = performance.now();
  const out = { error: null, ttft: null, prompt: null };
  try {
    const res = await fetch(`${url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body), signal: AbortSignal.timeout(timeoutMs) });
    out.requestId = res.headers.get('x-warmslot-request-id');
    out.route = res.headers.get('x-warmslot-route');
    out.disk = res.headers.get('x-warmslot-disk');
    if (res.status !== 200) {
      out.error = `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}`;
      return out;
    }
    await readSse(res, (data) => {
      if (data === '[DONE]') return;
      const ev = JSON.parse(data);
      if (ev.error || ev.type === 'error') throw new Error(`streamed error: ${data.slice(0, 200)}`);
      const u = ev.type === 'message_start' ? ev.message?.usage : undefined;
      if (u) {
        out.prompt = (u.input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0);
        out.processed = u.input_tokens ?? 0;
      }
      if (ev.timings) {
        out.prompt = ev.timings.prompt_n + ev.timings.cache_n;
        out.processed = ev.timings.prompt_n;
      }
      const text = ev.type === 'content_block_delta' ? ev.delta?.text ?? ev.delta?.thinking
        : ev.choices?.[0]?.delta?.content ?? ev.choices?.[0]?.delta?.reasoning_content;
      if (out.ttft === null && text) out.ttft = performance.now() - t0;
    });
  } catch (e) {
    out.error = String(e.message ?? e);
  }
  out.total = performance.now() - t0;
  out.ttft ??= out.total;
  return out;
}

// Replays the workload against `url`. `restartAt`: after that many requests have been sent, new
// requests wait, the running ones finish, `restart()` runs, and the users go on.
export async function replay(w, { url, api, maxTokens, timeoutMs, restartAt, restart, say }) {
  const records = [];
  let sent = 0;
  let inflight = 0;
  let gate = null;  // a promise the users wait on while the restart runs
  let drained = null;
  let restarted = false;
  const t0 = performance.now();
  const one = async (user, agent, i, step) => {
    while (gate) await gate;
    if (restartAt !== undefined && sent === restartAt && !restarted) {
      restarted = true;
      gate = (async () => {
        await new Promise((resolve) => { drained = resolve; if (inflight === 0) resolve(); });
        await restart();
      })().finally(() => { gate = null; });
      await gate;
    }
    const seq = sent++;
    inflight++;
    const body = requestBody(api, renderTexts(user, step), { maxTokens, cch: (seq * 7919 + 10007).toString(16).slice(-5).padStart(5, '0') });
    const at = (performance.now() - t0) / 1000;
    const r = await send(url, api, body, timeoutMs);
    inflight--;
    if (inflight === 0 && drained) { drained(); drained = null; }
    records.push({ key: `${user.id}/${agent}/${i}`, seq, user: user.id, agent, at, ...r });
    if (r.error) say(`  ${user.id} ${agent} #${i}: ${r.error}`);
  };
  const run = async (user, sess, agent) => {
    for (const [i, step] of sess.steps.entries()) {
      const think = w.think(step.think);
      if (think > 0) await sleep(think * 1000);
      if (step.ids) await one(user, agent, i, step);
      else await Promise.all(step.group.map((sub) => run(user, sub, `${agent}>${sub.name}`)));
    }
  };
  await Promise.all(w.users.map(async (u) => { await sleep(u.start * 1000); await run(u, u.main, 'main'); }));
  if (gate) await gate;
  return { records: records.sort((a, b) => a.seq - b.seq), wall: (performance.now() - t0) / 1000 };
}

// The access lines of warmslot's log: { requestId -> { route, disk, processed, primed } }.
export function accessLines(logFile) {
  const out = new Map();
  const re = /req=(\S+) POST \S+ (\d+) backend=\S+ slot=\S+ route="([^"]*)"(?: waited="[^"]*")?(?: disk="([^"]*)")?(?: rewrites="[^"]*")? (?:cached=(\d+) processed=(\d+)(?: \(prime=(\d+), request=\d+\))?|-)/;
  for (const line of fs.readFileSync(logFile, 'utf8').split('\n')) {
    const m = line.match(re);
    if (m) out.set(m[1], { status: Number(m[2]), route: m[3], disk: m[4] ?? '', processed: Number(m[6] ?? 0), primed: Number(m[7] ?? 0) });
  }
  return out;
}

// "hit; waited_ms=12" -> "hit (waited)": routes grouped without their numbers.
export function routeKind(route) {
  if (!route) return '-';
  const parts = route.split(';').map((p) => p.trim()).filter(Boolean);
  const waited = parts.some((p) => p.startsWith('waited_ms='));
  const base = parts.filter((p) => !/^(waited_ms|reused|tokens|slot)=/.test(p)).join('; ');
  return waited ? `${base} (waited)` : base;
}
const diskKind = (d) => (d ? d.replace(/\d+(\.\d+)?\s*(ms|tokens|bytes|B|KiB|MiB)?/g, '').replace(/[=\s]+/g, ' ').trim() : '');

// The tokens beyond the bound per route and disk action: [{ what, requests, computed, bound, excess }],
// with a row for what no request's line counts (start-up probes, background work).
function excessByRoute(records, access, perBound, total) {
  const groups = new Map();
  let counted = 0;
  for (const r of records) {
    const a = access.get(r.requestId);
    const what = a ? `${routeKind(a.route)}${a.disk ? ` / disk: ${diskKind(a.disk)}` : ''}` : `no access line${r.error ? ' (error)' : ''}`;
    const g = groups.get(what) ?? { what, requests: 0, computed: 0, primed: 0, bound: 0 };
    g.requests++;
    g.computed += a?.processed ?? 0;
    g.primed += a?.primed ?? 0;
    g.bound += perBound.get(r.key) ?? 0;
    groups.set(what, g);
    counted += a?.processed ?? 0;
  }
  const rows = [...groups.values()].map((g) => ({ ...g, excess: g.computed - g.bound }));
  rows.push({ what: 'outside requests (start-up probes, background)', requests: 0, computed: total - counted, primed: 0, bound: 0, excess: total - counted });
  return rows.sort((a, b) => b.excess - a.excess);
}

// Runs one configuration: its llama-server (and warmslot), the replay, an optional restart.
export async function runTraceConfig({ arch, model, id, slots, ctxPerSlot, w, api, restart, rendered, maxTokens, timeoutMs, say }) {
  const config = traceConfigs[id];
  const total = slots * ctxPerSlot;
  const sizing = config.defaults ? { slots: 0, extra: ['-c', String(total), ...(config.flags ?? [])] }
    : { slots, ctx: ctxPerSlot, extra: config.flags ?? [] };
  let llama = await startLlama({ arch, model, ...sizing });
  let ws = null;
  let before = 0;  // prompt tokens of the llama-server processes stopped by a restart
  try {
    if (config.warmslot) {
      ws = await startWarmslot({ backends: [{ name: 'b1', url: llama.url, slotSaveDir: llama.saveDir }], extra: config.extra ?? '' });
      // In front of llama-server's defaults warmslot passes requests through unrouted, by design.
      await waitFor('warmslot to route or pass through', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing ||
        /backend b1: passed through without routing/.test(fs.readFileSync(ws.logFile, 'utf8')), 60000);
    }
    // warmslot's start-up probe of the backend: counted in `computed`, and shown apart.
    const startup = await promptTokensTotal(llama.url);
    const doRestart = async () => {
      before += await promptTokensTotal(llama.url);
      say(`  restarting llama-server (${before} prompt tokens so far)`);
      llama = await restartLlama(llama);
    };
    const restartAt = restart ? Math.ceil(w.requests / 2) : undefined;
    const { records, wall } = await replay(w, { url: ws ? ws.url : llama.url, api, maxTokens, timeoutMs, restartAt, restart: doRestart, say });
    await sleep(1000);  // background work (a save after a request) settles
    const computed = before + await promptTokensTotal(llama.url);
    // Each request's share of the bound, in the order this run sent them.
    const add = prefixCounter();
    const perBound = new Map(records.map((r) => [r.key, add(rendered.get(r.key))]));
    const bound = [...perBound.values()].reduce((a, b) => a + b, 0);
    const ok = records.filter((r) => !r.error);
    const mismatched = ok.filter((r) => r.prompt !== null && r.prompt !== rendered.get(r.key).length).length;
    const result = { id, label: config.label, warmslot: Boolean(config.warmslot), restart, computed, startup, bound, wall, records, mismatched,
      errors: records.length - ok.length, ttft50: percentile(ok.map((r) => r.ttft), 0.5), ttft95: percentile(ok.map((r) => r.ttft), 0.95),
      args: llama.args.filter((a, i, all) => !['-m', '--port', '--slot-save-path', '--host'].includes(all[i - 1]) &&
        !['-m', '--port', '--slot-save-path', '--host', '127.0.0.1'].includes(a)) };
    if (ws) {
      await ws.stop();
      ws.stopped = true;
      result.excess = excessByRoute(records, accessLines(ws.logFile), perBound, computed);
      result.log = ws.logFile;
    }
    return result;
  } finally {
    if (ws && !ws.stopped) await ws.stop().catch(() => {});
    await llama.stop();
  }
}
