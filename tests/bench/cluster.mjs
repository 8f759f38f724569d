// The cluster benchmark: documents and their questions through HAProxy in front of two warmslot
// hosts (deploy/cluster/cluster.sh: network namespaces on this machine), with prefix affinity,
// against round robin over the same two hosts and against one host; then, with affinity, one
// host's llama-server killed mid-stream. Prints a table (docs/scaling.md).
//
//   node tests/bench/cluster.mjs [--docs N] [--questions N] [--doc-bytes N] [--slots N]
//                                [--clients N] [--disk] [--shared DIR|gluster] [--hot] [--out DIR]
//
//   --docs       documents (default 8), each in the system message of its questions
//   --questions  questions per document before the failure (default 5); 2 more each after it
//   --doc-bytes  about this many bytes (= tokens on the test model) per document (default 8000)
//   --slots      llama-server -np per host (default 5; one of them is warmslot's scratch slot)
//   --clients    requests in flight at once before the failure (default 1)
//   --disk       each host's warmslot with its disk tier (default: slots only)
//   --shared     host loss with and without the shared tier: prefix affinity and disk tiers
//                twice, the second time with cache.shared_dir DIR (a plain directory both hosts
//                see; a new one is made inside it per run) or on a GlusterFS volume with a brick
//                in each host (`gluster`); h2 is lost: its llama-server killed (and with
//                `gluster` its brick); then h2's documents are asked on h1
//   --hot        one hot document asked by --clients (default 4) at once: prefix affinity
//                without a balance factor, with haproxy.cfg's hash-balance-factor 150 and the
//                shared tier (--shared, default a plain directory), and with the factor but
//                without the shared tier
//   --out        directory for per-request details and logs (default: a new temporary one)
//
// Every host's llama-server runs with --cache-ram 0 and -t 1: a host remembers only what its
// slots hold, and each host has one core of its own. Needs root (network namespaces) and haproxy.
// WARMSLOT_BIN selects the warmslot binary (default build/proxy/warmslot).
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { startLlama } from '../integration/lib/llama.mjs';
import { freePort, sleep, tempDir } from '../integration/lib/procs.mjs';
import { makeDocument, rng } from '../integration/lib/text.mjs';
import { lowerBound, percentile } from './lib/client.mjs';
import { docRequests } from './lib/workloads.mjs';
import { hostPromptTokens, startCluster, streamOnce } from '../integration/lib/cluster.mjs';
import { docHosts, failoverLines, runFailover } from './lib/failover.mjs';

function usage(code) {
  const text = fs.readFileSync(new URL(import.meta.url), 'utf8').split('\n').slice(5, 20)
    .map((l) => l.replace(/^\/\/ ?/, '')).join('\n');
  (code ? process.stderr : process.stdout).write(`${text}\n`);
  process.exit(code);
}

function parseArgs(argv) {
  const o = { docs: 8, questions: 5, docBytes: 8000, slots: 5, clients: null, disk: false, out: null,
    shared: null, hot: false };
  const numbers = { '--docs': 'docs', '--questions': 'questions', '--doc-bytes': 'docBytes', '--slots': 'slots',
    '--clients': 'clients' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (numbers[a]) {
      const v = Number.parseInt(argv[++i], 10);
      if (!(v > 0)) { console.error(`cluster.mjs: ${a} needs a positive number`); usage(2); }
      o[numbers[a]] = v;
    } else if (a === '--out') o.out = argv[++i];
    else if (a === '--disk') o.disk = true;
    else if (a === '--shared') o.shared = argv[++i];
    else if (a === '--hot') o.hot = true;
    else if (a === '-h' || a === '--help') usage(0);
    else { console.error(`cluster.mjs: unknown argument ${a}`); usage(2); }
  }
  if (o.shared !== null && o.shared !== 'gluster' && !path.isAbsolute(o.shared)) {
    console.error('cluster.mjs: --shared is an absolute directory or gluster');
    usage(2);
  }
  o.clients ??= o.hot ? 4 : 1;
  return o;
}

const started = performance.now();
const say = (m) => process.stderr.write(`cluster [${String(Math.round((performance.now() - started) / 1000)).padStart(4)}s]: ${m}\n`);
const fmtInt = (n) => Math.round(n).toLocaleString('en-US');
const fmtMs = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`);

const configs = [
  { id: 'affinity', label: 'HAProxy, prefix affinity (`balance hash`), 2 hosts', args: ['--hosts', '2', '--balance', 'hash'], failover: true },
  { id: 'rr', label: 'HAProxy, round robin, same 2 hosts', args: ['--hosts', '2', '--balance', 'roundrobin'] },
  { id: 'one', label: 'one host', args: ['--hosts', '1'] },
];

// The shared directory of one run: `gluster`, or a new directory inside the one given.
function sharedArg(opts, id) {
  if (opts.shared === 'gluster') return 'gluster';
  const base = opts.shared ?? tempDir('cluster-shared');
  return fs.mkdtempSync(path.join(base, `${id}-`));
}

function sharedConfigs(opts) {
  return [
    { id: 'disk', label: 'prefix affinity, each host its disk tier', args: ['--hosts', '2', '--disk'], failover: true },
    { id: 'shared', label: `prefix affinity, disk tiers and the shared tier (${opts.shared === 'gluster' ? 'GlusterFS' : 'a directory both hosts see'})`,
      args: ['--hosts', '2', '--disk', '--shared', sharedArg(opts, 'shared')], failover: true, shared: opts.shared },
  ];
}

function hotConfigs(opts) {
  const kind = opts.shared === 'gluster' ? 'GlusterFS' : 'a directory both hosts see';
  return [
    { id: 'hot', label: `prefix affinity, shared tier (${kind}), no balance factor`,
      args: ['--hosts', '2', '--disk', '--shared', sharedArg(opts, 'hot'), '--balance-factor', '0'] },
    { id: 'hot-factor', label: `prefix affinity, shared tier (${kind}), \`hash-balance-factor 150\` (haproxy.cfg)`,
      args: ['--hosts', '2', '--disk', '--shared', sharedArg(opts, 'hot-factor')] },
    { id: 'hot-factor-disk', label: 'prefix affinity, disk tiers only, `hash-balance-factor 150`',
      args: ['--hosts', '2', '--disk'] },
  ];
}

// Tokens per slot: a document, its question and a long answer for the failure step.
const ctxPerSlot = (opts) => opts.docBytes * 2 + 4096;

// Sends `requests` through the balancer, `clients` at a time, each client taking the next one.
async function replay(url, requests, clients, extra = {}) {
  const records = new Array(requests.length);
  let next = 0;
  const client = async () => {
    while (next < requests.length) {
      const i = next++;
      const r = await streamOnce(url, requests[i], extra);
      records[i] = { i, key: requests[i].key, host: r.host, ok: r.ok, status: r.status, error: r.error,
        processed: r.timings?.prompt_n ?? null, cached: r.timings?.cache_n ?? null, promptMs: r.timings?.prompt_ms ?? null,
        ttft: r.ttft, total: r.total };
    }
  };
  await Promise.all(Array.from({ length: clients }, client));
  return records;
}

async function runConfig(opts, config, work, outDir) {
  const port = await freePort();
  const args = [...config.args, '--port', String(port), '--slots', String(opts.slots),
    '--ctx', String(ctxPerSlot(opts)), '--llama-args', '--cache-ram 0', '--duration', '1200',
    ...(opts.disk && !config.args.includes('--disk') ? ['--disk'] : [])];
  const cluster = await startCluster(args, { logFile: path.join(outDir, `${config.id}-cluster.log`) });
  try {
    const { info } = cluster;
    say(`${config.id}: cluster up (${info.dir}); ${work.requests.length} requests, ${opts.clients} at a time`);
    const before = await Promise.all(info.hosts.map(hostPromptTokens));
    // --hot: the document is asked once alone and has had time to be saved (and published) before
    // the burst, as a document that becomes hot has been read before; the burst is timed.
    const warm = work.warmFirst ? await replay(info.balancer, work.requests.slice(0, 1), 1, work.extra ?? {}) : [];
    if (work.warmFirst) await sleep(3000);
    const t0 = performance.now();
    const burst = await replay(info.balancer, work.requests.slice(warm.length), opts.clients, work.extra ?? {});
    const wall = (performance.now() - t0) / 1000;
    const records = [...warm, ...burst];
    await sleep(300);
    const after = await Promise.all(info.hosts.map(hostPromptTokens));
    const perHost = after.map((a, i) => a - before[i]);
    const result = { config, records, wall, perHost, tokens: perHost.reduce((a, b) => a + b, 0),
      errors: records.filter((r) => !r.ok).length, ttfts: records.filter((r) => r.ttft !== null).map((r) => r.ttft) };
    say(`${config.id}: ${fmtInt(result.tokens)} prompt tokens (${perHost.map(fmtInt).join(' + ')}), ` +
      `${result.errors} errors, wall ${wall.toFixed(1)} s`);
    if (config.failover) {
      result.failover = await runFailover(cluster.info, records,
        { ...work, ctx: ctxPerSlot(opts), gluster: config.shared === 'gluster' }, say);
    }
    result.logs = info.dir;
    return result;
  } finally {
    const r = await cluster.stop();
    if (r.code !== 0 && r.code !== 143) say(`cluster.sh ended with ${JSON.stringify(r)}`);
  }
}

function report(opts, work, bound, results) {
  const lines = [
    `${opts.docs} documents of about ${fmtInt(opts.docBytes)} bytes (system parts of ` +
    `${fmtInt(Math.min(...work.systemTokens))} to ${fmtInt(Math.max(...work.systemTokens))} tokens), ${opts.questions} questions each, ` +
    `shuffled, ${opts.clients} requests in flight at a time; each host: llama-server -np ${opts.slots} --cache-ram 0 -t 1 ` +
    `and warmslot${opts.disk || opts.shared !== null ? ' with its disk tier' : ' without a disk tier'}.`,
    '',
    '| configuration | prompt tokens processed | x lower bound | per host | errors | median TTFT | p90 TTFT | wall s |',
    '|---|---:|---:|---|---:|---:|---:|---:|',
    `| lower bound (each document once, plus every question) | ${fmtInt(bound)} | 1.00 | | | | | |`,
  ];
  for (const r of results) {
    lines.push(`| ${r.config.label} | ${fmtInt(r.tokens)} | ${(r.tokens / bound).toFixed(2)} | ` +
      `${r.perHost.map(fmtInt).join(' + ')} | ${r.errors} | ${fmtMs(percentile(r.ttfts, 0.5))} | ` +
      `${fmtMs(percentile(r.ttfts, 0.9))} | ${r.wall.toFixed(1)} |`);
  }
  const by = Object.fromEntries(results.map((r) => [r.config.id, r]));
  const check = (ok, text) => lines.push(`- ${ok ? 'PASS' : 'FAIL'}: ${text}`);
  lines.push('');
  if (by.affinity) {
    const x = by.affinity.tokens / bound;
    check(x <= 1.1, `affinity at most 1.1x the lower bound: ${x.toFixed(2)}x`);
    if (by.rr) {
      const f = by.affinity.tokens / by.rr.tokens;
      check(f <= 0.5, `affinity at most half of round robin's tokens: ${f.toFixed(2)} of it`);
    }
    const hosts = docHosts(by.affinity.records);
    const split = new Map();
    for (const h of hosts.values()) split.set(h, (split.get(h) ?? 0) + 1);
    lines.push(`- documents per host with affinity: ${[...split].sort().map(([h, n]) => `${h} ${n}`).join(', ')}`);
    // What moving a document to another host costs there: its prefill, at the rate measured on
    // the requests that recomputed one.
    const full = by.affinity.records.filter((x) => x.ok && x.processed > 1000 && x.promptMs > 0);
    if (full.length) {
      const rate = full.reduce((a, x) => a + x.processed, 0) / full.reduce((a, x) => a + x.promptMs, 0) * 1000;
      lines.push(`- prefill on a host, measured on the ${full.length} requests that computed a document: ` +
        `${fmtInt(rate)} tokens/s, so moving one of these documents to another host costs that host ` +
        `${fmtMs(Math.max(...work.systemTokens) / rate * 1000)} of prefill`);
    }
  }
  for (const r of results.filter((x) => x.failover)) {
    if (results.filter((x) => x.failover).length > 1) lines.push('', `**${r.config.label}:**`);
    lines.push('', ...failoverLines(r.failover, fmtInt, fmtMs));
  }
  if (opts.shared !== null && !opts.hot) lines.push('', ...hostLossTable(results));
  return lines.join('\n');
}

// Host loss side by side: what h1 computed for h2's documents, with and without the shared tier.
function hostLossTable(results) {
  const lines = ['| configuration | h2\'s documents (system tokens) | h1 computed after the loss | the questions alone | recomputed | worst request on an h2 document: computed (with priming) - its question | median TTFT, first request per h2 document |',
    '|---|---:|---:|---:|---:|---:|---:|'];
  const checks = [];
  for (const r of results.filter((x) => x.failover && !x.failover.skipped)) {
    const f = r.failover;
    const dead = f.records.filter((x) => x.dead);
    // The request's own prefill and the priming warmslot ran for it (a snapshot of the prefix).
    const worst = Math.max(...dead.map((x) => (x.processed ?? Infinity) + (x.primed ?? 0) - x.bound));
    const firsts = f.deadKeys.map((k) => dead.find((x) => x.key === k)).filter(Boolean);
    const med = firsts.map((x) => x.ttft ?? x.total).sort((a, b) => a - b)[Math.floor((firsts.length - 1) / 2)];
    lines.push(`| ${r.config.label} | ${fmtInt(f.deadSystem)} | ${fmtInt(f.survivorTokens)} | ${fmtInt(f.questionsBound)} | ` +
      `${fmtInt(f.survivorTokens - f.questionsBound)} | ${fmtInt(worst)} | ${fmtMs(med)} |`);
    if (r.config.shared) checks.push(`- ${worst <= 64 ? 'PASS' : 'FAIL'}: with the shared tier every request on an h2 document computed at most its question plus 64 tokens (worst: +${fmtInt(worst)})`);
  }
  return [...lines, '', ...checks];
}

// The hot document: requests per host, and how many left the document's own host.
function hotReport(opts, work, results) {
  const lines = [
    `One document of about ${fmtInt(opts.docBytes)} bytes (${fmtInt(work.systemTokens[0])} system tokens), ` +
    `${work.requests.length} questions with answers of ${work.extra.max_tokens} tokens: the first alone, then after 3 s ` +
    `the other ${work.requests.length - 1} with ${opts.clients} in flight at a time (wall and requests/s: that burst); ` +
    `each host: llama-server -np ${opts.slots} --cache-ram 0 -t 1 and warmslot with its disk tier.`,
    '',
    '| configuration | prompt tokens processed | per host | requests per host | errors | median TTFT | p90 TTFT | wall s | requests/s |',
    '|---|---:|---|---|---:|---:|---:|---:|---:|',
  ];
  for (const r of results) {
    const per = {};
    for (const x of r.records.filter((y) => y.ok)) per[x.host] = (per[x.host] ?? 0) + 1;
    lines.push(`| ${r.config.label} | ${fmtInt(r.tokens)} | ${r.perHost.map(fmtInt).join(' + ')} | ` +
      `${Object.keys(per).sort().map((h) => `${h} ${per[h]}`).join(', ')} | ${r.errors} | ${fmtMs(percentile(r.ttfts, 0.5))} | ` +
      `${fmtMs(percentile(r.ttfts, 0.9))} | ${r.wall.toFixed(1)} | ${((r.records.length - 1) / r.wall).toFixed(2)} |`);
  }
  return lines.join('\n');
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const outDir = opts.out ?? tempDir('cluster-bench');
  fs.mkdirSync(outDir, { recursive: true });
  const r = rng(19 * 7919 + opts.docs);
  const docs = Array.from({ length: opts.docs }, (_, i) => makeDocument(19000 + i, opts.docBytes));
  // --hot: every question on the first document.
  const requests = opts.hot ? docRequests(r, docs.slice(0, 1), opts.docs * opts.questions)
    : docRequests(r, docs, opts.questions);
  const after = docRequests(r, docs, 2, opts.questions);
  say('computing the lower bound on a tokenizer-only llama-server on loopback');
  const tok = await startLlama({ slots: 1 });
  let bound;
  let all;
  try {
    bound = await lowerBound(tok.url, requests);
    all = await lowerBound(tok.url, [...requests, ...after]);
  } finally {
    await tok.stop();
  }
  const systemTokens = (opts.hot ? docs.slice(0, 1) : docs)
    .map((_, d) => bound.per[requests.findIndex((q) => q.key === `doc${d + 1}`)].system);
  const work = { requests, after, systemTokens, afterBound: all.per.slice(requests.length), keys: docs.map((_, d) => `doc${d + 1}`),
    extra: opts.hot ? { max_tokens: 48 } : {}, warmFirst: opts.hot };
  const results = [];
  const list = opts.hot ? hotConfigs(opts) : opts.shared !== null ? sharedConfigs(opts) : configs;
  for (const config of list) results.push(await runConfig(opts, config, work, outDir));
  const text = opts.hot ? hotReport(opts, work, results) : report(opts, work, bound.total, results);
  process.stdout.write(`${text}\n`);
  const detail = path.join(outDir, 'cluster.json');
  fs.writeFileSync(detail, JSON.stringify({ opts, lowerBound: bound.total, results }, null, 1));
  say(`details: ${detail}`);
}

main().catch((e) => {
  console.error(`cluster.mjs: ${e.stack ?? e}`);
  process.exitCode = 1;
});
