// The router benchmark: two models behind one llama-server in router mode with --models-max 1
// (it unloads one model to load the other), a long document for each, and requests that
// alternate between them. Per request it prints the prompt tokens llama-server computed and the
// seconds the request took (the switch included), for the router alone, for warmslot in front of
// the router (a model's slots saved before warmslot unloads it, restored after), and for
// warmslot's own swap group of the same two models (llama-server processes it starts and stops).
//
//   node tests/bench/router.mjs [--tokens N] [--swaps N] [--load N] [--write-doc]
//
//   --tokens N   the document of each model: about N tokens (default 16000)
//   --swaps N    switches between the models after the first request (default 4)
//   --load N     run it all again with N cores kept busy (default 0: idle only)
//   --write-doc  replace the table between <!-- router:begin --> and <!-- router:end --> in
//                docs/benchmarks.md
//
// Model A is the plain `llama` test model, B the hybrid `qwen35` one (tiny presets). Every
// process is started on 127.0.0.1 and stopped at the end, also on error.
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { llamaServerBin, modelPath, postJson, startRouter } from '../integration/lib/llama.mjs';
import { tempDir } from '../integration/lib/procs.mjs';
import { startWarmslot } from '../integration/lib/warmslot.mjs';
import { chat, makeDocument } from '../integration/lib/text.mjs';
import { replaceDocSection } from './lib/doc-section.mjs';
import { startLoad } from './lib/load.mjs';

function parseArgs(argv) {
  const o = { tokens: 16000, swaps: 4, load: 0, writeDoc: false };
  for (let i = 0; i < argv.length; i++) {
    const [name, inline] = argv[i].split('=');
    const value = () => Number.parseInt(inline ?? argv[++i], 10);
    if (name === '--tokens') o.tokens = value();
    else if (name === '--swaps') o.swaps = value();
    else if (name === '--load') o.load = value();
    else if (name === '--write-doc') o.writeDoc = true;
    else { console.error(`router.mjs: unknown argument ${argv[i]}`); process.exit(2); }
  }
  if (!(o.tokens >= 2000 && o.tokens <= 60000) || !(o.swaps >= 1 && o.swaps <= 20) ||
      !(o.load >= 0 && o.load <= 64)) {
    console.error('router.mjs: --tokens 2000..60000, --swaps 1..20, --load 0..64');
    process.exit(2);
  }
  return o;
}

const models = { 'model-a': 'llama', 'model-b': 'qwen35' };
const perSlot = (tokens) => tokens + 4096;  // each of two slots holds the document and more

// Sends A, B, A, ... to `url`; per request the prompt tokens llama-server computed for it
// (its timings, and warmslot's priming before it) and its seconds.
async function sequence(name, url, opts, docs) {
  const rows = [];
  for (let i = 0; i <= opts.swaps; i++) {
    const m = i % 2 === 0 ? 'model-a' : 'model-b';
    const q = `Question ${i}: what is on line ${i + 1}?`;
    const t0 = performance.now();
    const r = await postJson(`${url}/v1/chat/completions`, chat(docs[m], q, { model: m }));
    const seconds = (performance.now() - t0) / 1000;
    if (r.status !== 200) throw new Error(`${name}: HTTP ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
    const primed = Number(r.headers.get('x-warmslot-primed-tokens') ?? 0);
    rows.push({ m, tokens: r.body.timings.prompt_n + primed, seconds, disk: r.headers.get('x-warmslot-disk') ?? '' });
  }
  return rows;
}

async function alone(opts, docs) {
  const router = await startRouter({ models, max: 1, ctx: perSlot(opts.tokens) });
  try {
    return await sequence('router alone', router.url, opts, docs);
  } finally {
    await router.stop();
  }
}

async function behind(opts, docs) {
  const router = await startRouter({ models, max: 1, ctx: perSlot(opts.tokens) });
  const ws = await startWarmslot({
    backends: [{ name: 'r', url: router.url, slotSaveDir: router.saveDir,
      lines: ['router: true', `models: [${Object.keys(models).join(', ')}]`] }],
    extra: `routing:\n  reconcile_interval: 100ms\ncache:\n  dir: ${tempDir('router-bench')}\n`,
  });
  try {
    return await sequence('warmslot + router', ws.url, opts, docs);
  } finally {
    await ws.stop();
    await router.stop();
  }
}

async function group(opts, docs) {
  const server = (arch) => [llamaServerBin(), '-m', modelPath(arch), '-c', String(2 * perSlot(opts.tokens)),
    '-np', '2', '-t', '2'];
  const ws = await startWarmslot({
    backends: Object.entries(models).map(([m, arch]) => ({ name: m, command: server(arch),
      lines: [`models: [${m}]`, 'start_timeout: 10m'] })),
    extra: `routing:\n  reconcile_interval: 100ms\ncache:\n  dir: ${tempDir('router-bench-group')}\n` +
      'timeouts:\n  shutdown_grace: 60s\nswap_groups:\n  - name: gpu\n    backends: [model-a, model-b]\n    min_residency: 0s\n',
  });
  try {
    return await sequence('warmslot swap group', ws.url, opts, docs);
  } finally {
    await ws.stop();
  }
}

function intro(opts) {
  return [
    '## Router mode: two models behind one llama-server router',
    '',
    'A llama-server in router mode (`--models-preset`, `--models-max 1`) unloads one model to load',
    'the other, and the unloaded model\'s slots go with it. What a switch costs through the router',
    'alone, with warmslot in front of it (the model warmslot unloads has its valuable slots saved',
    'first; they are restored when it is asked for again), and with warmslot\'s own swap group of',
    'the same two models (llama-server processes warmslot starts and stops). Reproduce with',
    '',
    '```',
    `node tests/bench/router.mjs --tokens ${opts.tokens} --swaps ${opts.swaps}${opts.load ? ` --load ${opts.load}` : ''} --write-doc`,
    '```',
    '',
    'Tokens are the prompt tokens llama-server computed for the request (its `timings`, plus',
    'warmslot\'s priming before it, `X-Warmslot-Primed-Tokens`); seconds are the request as the',
    'client saw it, the switch included (save, unload, load, restore).',
  ];
}

function table(opts, runs, load) {
  const fmt = (n) => n.toLocaleString('en-US');
  const lines = [
    '',
    `A = \`llama\`, B = \`qwen35\` (hybrid), tiny presets, \`-np 2\`, a ${fmt(opts.tokens)}-token document each, requests A, B, A, ... (${opts.swaps} switches). ${load}.`,
    '',
    '| request | model | router alone: tokens | s | warmslot + router: tokens | s | warmslot swap group: tokens | s |',
    '|---|---|---:|---:|---:|---:|---:|---:|',
  ];
  const sums = [0, 0, 0, 0, 0, 0];
  for (let i = 0; i <= opts.swaps; i++) {
    const cells = [runs.alone[i], runs.behind[i], runs.group[i]];
    const label = i === 0 ? 'first' : i === 1 ? 'switch 1 (first visit)' : `switch ${i} (back)`;
    lines.push(`| ${label} | ${cells[0].m === 'model-a' ? 'A' : 'B'} | ${cells.map((c) => `${fmt(c.tokens)} | ${c.seconds.toFixed(1)}`).join(' | ')} |`);
    if (i >= 2) cells.forEach((c, k) => { sums[2 * k] += c.tokens; sums[2 * k + 1] += c.seconds; });
  }
  lines.push(`| switches back, total | | ${[0, 1, 2].map((k) => `${fmt(sums[2 * k])} | ${sums[2 * k + 1].toFixed(1)}`).join(' | ')} |`);
  return lines.join('\n');
}

const opts = parseArgs(process.argv.slice(2));
const docs = { 'model-a': makeDocument(4201, opts.tokens), 'model-b': makeDocument(4202, opts.tokens) };
const all = async () => ({ alone: await alone(opts, docs), behind: await behind(opts, docs), group: await group(opts, docs) });
const avg = () => os.loadavg().map((l) => l.toFixed(1)).join(' ');
const sections = [intro(opts).join('\n')];
const idle = await all();
sections.push(table(opts, idle, `No other load; load average ${avg()}`));
const runs = { idle };
if (opts.load > 0) {
  const generator = startLoad(opts.load);
  try {
    runs.loaded = await all();
    sections.push(table(opts, runs.loaded, `The same with ${opts.load} cores kept busy by other processes; load average ${avg()}`));
  } finally {
    await generator.stop();
  }
}
const text = sections.join('\n');
console.log(text);
for (const [when, configs] of Object.entries(runs)) {
  for (const [name, rows] of Object.entries(configs)) {
    for (const r of rows) console.error(`${when} ${name} ${r.m}: ${r.tokens} tokens, ${r.seconds.toFixed(1)} s, ${r.disk || '-'}`);
  }
}
if (opts.writeDoc) replaceDocSection('router', text);
