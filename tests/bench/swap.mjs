// The swap benchmark: two models that share one device (a swap group of two command backends,
// one running at a time), a long document for each, and requests that alternate between them.
// Per switch it prints the prompt tokens the new process computed and the seconds the request
// took (the swap included), for warmslot (slots saved before the stop, restored after the
// start), for stop/start without a cache (what llama-swap does: the same swaps with warmslot's
// disk tier off) and for the lower bound (the new process's start plus the question alone).
//
//   node tests/bench/swap.mjs [--tokens N] [--swaps N] [--write-doc]
//
//   --tokens N   the document of each model: about N tokens (default 32000)
//   --swaps N    switches between the models after the first request (default 5)
//   --write-doc  replace the table between <!-- swap:begin --> and <!-- swap:end --> in
//                docs/benchmarks.md
//
// Model A is the plain `llama` test model, B the hybrid `qwen35` one (tiny presets). Every
// process is started on 127.0.0.1 and stopped at the end, also on error.
import fs from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { llamaServerBin, modelPath, postJson, questionTokens } from '../integration/lib/llama.mjs';
import { tempDir } from '../integration/lib/procs.mjs';
import { startWarmslot } from '../integration/lib/warmslot.mjs';
import { chat, makeDocument } from '../integration/lib/text.mjs';
import { promptTokensTotal } from './lib/client.mjs';
import { replaceDocSection } from './lib/doc-section.mjs';

function parseArgs(argv) {
  const o = { tokens: 32000, swaps: 5, writeDoc: false };
  for (let i = 0; i < argv.length; i++) {
    const [name, inline] = argv[i].split('=');
    const value = () => Number.parseInt(inline ?? argv[++i], 10);
    if (name === '--tokens') o.tokens = value();
    else if (name === '--swaps') o.swaps = value();
    else if (name === '--write-doc') o.writeDoc = true;
    else { console.error(`swap.mjs: unknown argument ${argv[i]}`); process.exit(2); }
  }
  if (!(o.tokens >= 2000 && o.tokens <= 60000) || !(o.swaps >= 1 && o.swaps <= 20)) {
    console.error('swap.mjs: --tokens 2000..60000, --swaps 1..20');
    process.exit(2);
  }
  return o;
}

const ctx = (tokens) => String(2 * (tokens + 4096));  // two slots, each the document and more
const server = (model, tokens) => [llamaServerBin(), '-m', model, '-c', ctx(tokens), '-np', '2', '-t', '2'];

// The URL of the newest process of `backend`, from warmslot's log.
function backendUrl(ws, backend) {
  const log = fs.readFileSync(ws.logFile, 'utf8');
  const all = [...log.matchAll(new RegExp(`backend ${backend}: started llama-server \\(pid \\d+\\) on (http://[^,\\s]+)`, 'g'))];
  return all.at(-1)?.[1];
}

// warmslot's slot probe of a new process (one tiny prompt per slot): not part of a switch.
async function probeTokens(url) {
  let n = 0;
  for (const slot of [0, 1]) {
    n += (await postJson(`${url}/tokenize`, { content: `${slot}`, add_special: true })).body.tokens.length;
  }
  return n;
}

async function swapSeconds(ws) {
  const text = await (await fetch(`${ws.url}/metrics`)).text();
  const phase = (p) => Number(text.match(new RegExp(`warmslot_swap_seconds_total\\{phase="${p}"\\} (\\S+)`))?.[1] ?? 0);
  return { drain: phase('drain'), save: phase('save'), stop: phase('stop'), start: phase('start'),
    restore: phase('restore') };
}

// One configuration: the sequence A, B, A, B, ... through warmslot; per request the tokens the
// (new) process computed besides the probe, and the request's seconds.
async function run(name, opts, docs, cacheOn) {
  const cacheDir = tempDir(`swap-bench-${name}`);
  const ws = await startWarmslot({
    backends: [
      { name: 'a', command: server(modelPath('llama'), opts.tokens), lines: ['models: [model-a]', 'start_timeout: 10m'] },
      { name: 'b', command: server(modelPath('qwen35'), opts.tokens), lines: ['models: [model-b]', 'start_timeout: 10m'] },
    ],
    extra: `routing:\n  reconcile_interval: 100ms\ncache:\n  enabled: ${cacheOn}\n  dir: ${cacheDir}\n` +
      'timeouts:\n  shutdown_grace: 60s\nswap_groups:\n  - name: gpu\n    backends: [a, b]\n    min_residency: 0s\n',
  });
  const rows = [];
  try {
    for (let i = 0; i <= opts.swaps; i++) {
      const m = i % 2 === 0 ? 'a' : 'b';
      const q = `Question ${i}: what is on line ${i + 1}?`;
      const t0 = performance.now();
      const r = await postJson(`${ws.url}/v1/chat/completions`, chat(docs[m], q, { model: `model-${m}` }));
      const seconds = (performance.now() - t0) / 1000;
      if (r.status !== 200) throw new Error(`${name}: HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
      const url = backendUrl(ws, m);
      const tokens = (await promptTokensTotal(url)) - (await probeTokens(url));
      rows.push({ m, q, tokens, seconds, question: await questionTokens(url, q), disk: r.headers.get('x-warmslot-disk') ?? '' });
    }
    return { rows, phases: await swapSeconds(ws) };
  } finally {
    await ws.stop();
  }
}

function table(opts, results, load) {
  const { warm, cold } = results;
  // A switch's least cost: the new process (its start, as warmslot measured it on average)
  // and the question; no drain, no save, no restore, nothing of the document.
  const starts = opts.swaps + 1;
  const startSeconds = warm.phases.start / starts;
  // Each model's prefill rate: its first visit's tokens over the faster of the two runs.
  const rate = {};
  for (const i of [0, 1]) {
    rate[warm.rows[i].m] = warm.rows[i].tokens / Math.min(warm.rows[i].seconds, cold.rows[i].seconds);
  }
  const lines = [
    '## Swap groups: two models on one device',
    '',
    'What a switch between two models that may not run together costs, with their caches kept',
    'across swaps by warmslot and without (stop and start only, as llama-swap swaps). Reproduce with',
    '',
    '```',
    `node tests/bench/swap.mjs --tokens ${opts.tokens} --swaps ${opts.swaps} --write-doc`,
    '```',
    '',
    'Tokens are the prompt tokens the new llama-server process computed for the request',
    "(its own `llamacpp:prompt_tokens_total`, less warmslot's slot probe of a new process);",
    'seconds are the request as the client saw it, the swap included (drain, save, stop, start,',
    'restore). The lower bound of a first visit is the faster of the two runs (the document is',
    'computed once whatever the proxy does); of a switch back, the new process\'s start',
    '(warmslot\'s average) plus the question at that model\'s prefill rate: no drain, save or',
    'restore, nothing of the document.',
    '',
    `Two models in one swap group (max_running 1): A = \`llama\`, B = \`qwen35\` (tiny presets), a ${opts.tokens.toLocaleString('en-US')}-token document each, requests A, B, A, ... (${opts.swaps} switches). Load average ${load}.`,
    '',
    '| request | model | warmslot: tokens | warmslot: s | stop/start, no cache: tokens | stop/start, no cache: s | lower bound: tokens | lower bound: s |',
    '|---|---|---:|---:|---:|---:|---:|---:|',
  ];
  let sums = [0, 0, 0, 0, 0, 0];
  for (let i = 0; i < warm.rows.length; i++) {
    const w = warm.rows[i];
    const c = cold.rows[i];
    const boundTokens = i < 2 ? c.tokens : w.question;
    // A first visit computes the document whatever the proxy does: the faster run is its bound.
    const boundSeconds = i < 2 ? Math.min(w.seconds, c.seconds) : startSeconds + w.question / rate[w.m];
    const label = i === 0 ? 'first' : i === 1 ? 'switch 1 (first visit)' : `switch ${i} (back)`;
    lines.push(`| ${label} | ${w.m.toUpperCase()} | ${w.tokens.toLocaleString('en-US')} | ${w.seconds.toFixed(1)} | ${c.tokens.toLocaleString('en-US')} | ${c.seconds.toFixed(1)} | ${boundTokens.toLocaleString('en-US')} | ${boundSeconds.toFixed(1)} |`);
    if (i >= 2) sums = sums.map((s, k) => s + [w.tokens, w.seconds, c.tokens, c.seconds, boundTokens, boundSeconds][k]);
  }
  lines.push(`| switches back, total | | ${sums[0].toLocaleString('en-US')} | ${sums[1].toFixed(1)} | ${sums[2].toLocaleString('en-US')} | ${sums[3].toFixed(1)} | ${sums[4].toLocaleString('en-US')} | ${sums[5].toFixed(1)} |`);
  const p = warm.phases;
  lines.push('', `warmslot's swaps in this run, summed: drain ${p.drain.toFixed(2)} s, save ${p.save.toFixed(2)} s, stop ${p.stop.toFixed(2)} s, start (until healthy) ${p.start.toFixed(2)} s, first restore after a start ${p.restore.toFixed(2)} s; without the cache: start ${cold.phases.start.toFixed(2)} s.`);
  return lines.join('\n');
}

const opts = parseArgs(process.argv.slice(2));
const docs = { a: makeDocument(3201, opts.tokens), b: makeDocument(3202, opts.tokens) };
const warm = await run('warmslot', opts, docs, true);
const cold = await run('no-cache', opts, docs, false);
const text = table(opts, { warm, cold }, os.loadavg().map((l) => l.toFixed(1)).join(' '));
console.log(text);
for (const r of warm.rows) console.error(`warmslot ${r.m}: ${r.tokens} tokens, ${r.seconds.toFixed(1)} s, ${r.disk || '-'}`);
if (opts.writeDoc) replaceDocSection('swap', text);
