// What naming a request by its tokens costs per request, on a 20K- and a 100K-token prompt, idle
// and with one core kept busy:
// - the two calls to llama-server that name a prompt seen for the first time (POST
//   /apply-template with the request, then POST /tokenize of the whole rendered prompt with
//   special tokens added and parsed), sent straight to llama-server;
// - warmslot's own step, timed by warmslot (its debug log's "prompt tokens" lines, summed per
//   request): for a new document each time, and for a conversation that grows by a turn per
//   request, whose repeated parts warmslot does not send to /tokenize again
//   (cache/token_parts.hpp). llama-server runs with a 4096-token context there, so it refuses
//   each request right after warmslot named it: no prefill is waited for.
// Hashing the tokens into their block chain is measured by build/tests/bench/fingerprint_bench
// (pure code); this prints the hash time beside the calls when that binary is built.
//
//   node tests/bench/tokens.mjs [--runs N] [--write-doc]
//
//   --runs N     timed requests per case, after 3 untimed ones (default 30)
//   --write-doc  replace the table between <!-- tokens:begin --> and <!-- tokens:end --> in
//                docs/benchmarks.md
//
// Both test models (tiny presets) are measured; each llama-server runs on 127.0.0.1 with one
// slot and is stopped at the end, also on error.
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { postJson, startLlama } from '../integration/lib/llama.mjs';
import { repoRoot, waitFor } from '../integration/lib/procs.mjs';
import { startWarmslot } from '../integration/lib/warmslot.mjs';
import { makeDocument } from '../integration/lib/text.mjs';
import { startLoad } from './lib/load.mjs';

function parseArgs(argv) {
  const o = { runs: 30, writeDoc: false };
  for (let i = 0; i < argv.length; i++) {
    const [name, inline] = argv[i].split('=');
    if (name === '--runs') o.runs = Number.parseInt(inline ?? argv[++i], 10);
    else if (name === '--write-doc') o.writeDoc = true;
    else { console.error(`tokens.mjs: unknown argument ${argv[i]}`); process.exit(2); }
  }
  if (!(o.runs >= 5 && o.runs <= 1000)) { console.error('tokens.mjs: --runs 5..1000'); process.exit(2); }
  return o;
}

const quantile = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

// A chat request of about `tokens` prompt tokens: a system document and a question (the test
// models' vocabulary makes about one token per byte).
function body(tokens, seed) {
  return {
    messages: [{ role: 'system', content: makeDocument(seed, tokens) },
      { role: 'user', content: 'What is on the first line?' }],
    max_tokens: 4,
  };
}

async function measure(url, b, runs) {
  const render = [], tokenize = [], total = [];
  let count = 0;
  for (let i = 0; i < runs + 3; i++) {
    const t0 = performance.now();
    const text = await postJson(`${url}/apply-template`, b);
    const t1 = performance.now();
    const ids = await postJson(`${url}/tokenize`, { content: text.body.prompt, add_special: true, parse_special: true });
    const t2 = performance.now();
    if (text.status !== 200 || ids.status !== 200) throw new Error(`llama-server answered ${text.status}/${ids.status}`);
    count = ids.body.tokens.length;
    if (i < 3) continue;
    render.push(t1 - t0); tokenize.push(t2 - t1); total.push(t2 - t0);
  }
  return { count, render, tokenize, total };
}

// warmslot's step per request, from its debug log since the previous request: the render and
// tokenize times of the request's own prompt (its longest "prompt tokens" line), and the whole
// step's wall time ("request named by N tokens in X ms": the request and, at the same time, its
// stable messages when their count is not remembered yet).
async function measureWarmslot(ws, bodies, runs) {
  const render = [], tokenize = [], total = [];
  let count = 0;
  let offset = fs.statSync(ws.logFile).size;
  const linesSince = () => {
    const text = fs.readFileSync(ws.logFile, 'utf8');
    const fresh = text.slice(offset);
    offset = text.length;
    return {
      prompts: [...fresh.matchAll(/prompt tokens: (\d+) from \d+ bytes, rendered in ([\d.]+) ms, tokenized in ([\d.]+) ms/g)]
        .map((m) => ({ tokens: Number(m[1]), render: Number(m[2]), tokenize: Number(m[3]) })),
      steps: [...fresh.matchAll(/request named by \d+ tokens in ([\d.]+) ms/g)].map((m) => Number(m[1])),
    };
  };
  for (let i = 0; i < runs + 3; i++) {
    const r = await postJson(`${ws.url}/v1/chat/completions`, bodies(i));
    if (r.status === 200) throw new Error('llama-server answered a prompt longer than its context');
    const seen = { prompts: [], steps: [] };
    await waitFor('warmslot to log the request\'s tokens', () => {
      const l = linesSince();
      seen.prompts.push(...l.prompts);
      seen.steps.push(...l.steps);
      return seen.steps.length > 0;
    }, 10000, 5);
    const own = seen.prompts.reduce((a, l) => (l.tokens > a.tokens ? l : a));
    count = own.tokens;
    if (i < 3) continue;
    render.push(own.render); tokenize.push(own.tokenize); total.push(seen.steps.reduce((a, x) => a + x, 0));
  }
  return { count, render, tokenize, total };
}

// A conversation of about `tokens` tokens that grows by one short turn per request.
function conversation(tokens, seed) {
  const doc = makeDocument(seed, tokens);
  return (i) => {
    const messages = [{ role: 'system', content: doc }];
    for (let t = 0; t <= i; t++) {
      messages.push({ role: 'user', content: `Question ${t}: what is on line ${t + 1}?` });
      if (t < i) messages.push({ role: 'assistant', content: `Line ${t + 1} says ${seed}.${t + 1}.` });
    }
    return { messages, max_tokens: 1 };
  };
}

// Microseconds to hash `tokens` tokens into their block chain, from fingerprint_bench's table.
function hashMicros() {
  const bin = path.join(repoRoot, process.env.WARMSLOT_BUILD_DIR ?? 'build', 'tests/bench/fingerprint_bench');
  if (!fs.existsSync(bin)) return new Map();
  const out = execFileSync(bin, ['100'], { encoding: 'utf8' });
  const m = new Map();
  for (const line of out.split('\n')) {
    const r = line.match(/^\| (\d+)K-token block chain \| \d+ \| ([\d.]+) \|/);
    if (r) m.set(Number(r[1]) * 1000, Number(r[2]));
  }
  return m;
}

const o = parseArgs(process.argv.slice(2));
const hashes = hashMicros();
const rows = [];
const row = (arch, load, what, r, size) => {
  const hash = hashes.get(size);
  rows.push(`| ${arch} | ${load} | ${what} | ${r.count} | ${quantile(r.render, 0.5).toFixed(1)} | ` +
    `${quantile(r.tokenize, 0.5).toFixed(1)} | ${hash === undefined ? '-' : (hash / 1000).toFixed(2)} | ` +
    `**${(quantile(r.total, 0.5) + (hash ?? 0) / 1000).toFixed(1)}** | ${(quantile(r.total, 0.95) + (hash ?? 0) / 1000).toFixed(1)} |`);
  console.error(rows.at(-1));
};
for (const arch of ['llama', 'qwen35']) {
  const llama = await startLlama({ arch, slots: 1, ctx: 4096 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: 'cache:\n  min_prefix_tokens: 1024\n', logLevel: 'debug' });
  try {
    for (const load of [0, 1]) {
      const busy = startLoad(load);
      try {
        for (const size of [20000, 100000]) {
          row(arch, load, 'straight to llama-server, whole', await measure(llama.url, body(size, 900 + size / 1000), o.runs), size);
          row(arch, load, 'warmslot, a new document each time',
            await measureWarmslot(ws, (i) => body(size, 5000 + 100 * load + size / 1000 + i), o.runs), size);
          row(arch, load, 'warmslot, a conversation growing a turn at a time',
            await measureWarmslot(ws, conversation(size, 7000 + 100 * load + size / 1000), o.runs), size);
        }
      } finally {
        await busy.stop();
      }
    }
  } finally {
    await ws.stop();
    await llama.stop();
  }
}

const table = [
  `${o.runs} requests per case after 3 untimed ones; load = cores kept busy; ms per request`,
  '',
  '| model | load | prompts | prompt tokens | render p50 | tokenize p50 | hash chain | total p50 | total p95 |',
  '|---|---:|---|---:|---:|---:|---:|---:|---:|',
  ...rows,
].join('\n');
console.log(table);

if (o.writeDoc) {
  const file = path.join(repoRoot, 'docs/benchmarks.md');
  const doc = fs.readFileSync(file, 'utf8');
  const begin = '<!-- tokens:begin -->', end = '<!-- tokens:end -->';
  const i = doc.indexOf(begin), j = doc.indexOf(end);
  if (i < 0 || j < i) { console.error('tokens.mjs: docs/benchmarks.md has no tokens markers'); process.exit(1); }
  const day = new Date().toISOString().slice(0, 10);
  const text = `${begin}\nMeasured ${day} on the same 2-core machine (RelWithDebInfo build):\n\n${table}\n${end}`;
  fs.writeFileSync(file, doc.slice(0, i) + text + doc.slice(j + end.length));
  console.error('tokens.mjs: docs/benchmarks.md updated');
}
