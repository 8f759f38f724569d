// The trace replay benchmark: real coding-agent sessions (a directory of traces in the format of
// ../shared/traces, see its README) replayed as concurrent users against llama-server alone and
// behind warmslot, side by side in one run at the same memory (-c). Prints per model a table of
// prompt tokens llama-server computed (its /metrics, warmslot's priming and probes included),
// the ratio to the lower bound (every distinct prefix of the rendered prompts counted once),
// TTFT p50/p95 and errors, and for warmslot the tokens beyond the bound per route and disk action.
//
//   node tests/bench/traces.mjs [--traces DIR] [--users N] [--slots N] [--seed N] [--requests N]
//        [--max-prompt TOKENS] [--block-tokens N] [--subagents | --no-subagents]
//        [--think-scale X] [--think-cap S] [--stagger S] [--max-output N] [--arch llama|qwen35]...
//        [--api messages|chat]... [--configs LIST] [--restart no|yes|both] [--load N] [--out FILE]
//
//   --traces      trace directory (default ../shared/traces beside the repository)
//   --users       concurrent users, one trace each, picked by --seed (default 4)
//   --slots       N of -np N; -c is N x (longest rendered prompt + 256) in every row (default 2)
//   --requests    requests per agent (main agent and each sub-agent), from the start (default 10)
//   --max-prompt  a user stops before its first prompt longer than this (scaled) (default 16384)
//   --block-tokens  tokens of text per 64-token trace block (default 16)
//   --subagents   only traces with sub-agents; --no-subagents: do not replay sub-agents
//   --think-scale, --think-cap  think times scaled by X (default 0.1) and capped at S s (default 2)
//   --stagger     user i starts i x S seconds after the first (default 2)
//   --configs     comma list of defaults,np,ws,ws-rules,ws-unified,ws-defaults (default defaults,np,ws)
//   --restart     no | yes (restart llama-server halfway) | both (default both)
//   --out         write every request's record as JSON to FILE
//
// WARMSLOT_BIN selects the warmslot binary (default build/proxy/warmslot). Every process is
// started on 127.0.0.1 and stopped at the end.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { modelPath, startLlama } from '../integration/lib/llama.mjs';
import { repoRoot } from '../integration/lib/procs.mjs';
import { startLoad } from './lib/load.mjs';
import { buildTraceWorkload, listTraces } from './lib/trace-workload.mjs';
import { lowerBoundOf, renderAll, runTraceConfig, traceConfigs } from './lib/trace-run.mjs';
import { traceReport } from './lib/trace-report.mjs';

// ../shared/traces beside the checkout; in a git worktree, beside the main checkout.
function defaultTraces() {
  const beside = path.resolve(repoRoot, '../shared/traces');
  if (fs.existsSync(beside)) return beside;
  try {
    const common = execFileSync('git', ['-C', repoRoot, 'rev-parse', '--path-format=absolute', '--git-common-dir'], { encoding: 'utf8' }).trim();
    const main = path.resolve(path.dirname(common), '../shared/traces');
    if (fs.existsSync(main)) return main;
  } catch { /* not a git checkout */ }
  return beside;
}

export const traceDefaults = {
  traces: defaultTraces(), users: 4, slots: 2, seed: 1, maxRequests: 10,
  maxPromptTokens: 16384, blockTokens: 16, subagents: true, subagentsOnly: false, thinkScale: 0.1,
  thinkCap: 2, stagger: 2, maxTokens: 8, archs: [], apis: [], configs: ['defaults', 'np', 'ws'],
  restart: 'both', load: 0, out: null, timeoutMs: 900000,
};

function parseArgs(argv) {
  const o = { ...traceDefaults, archs: [], apis: [] };
  const num = (v, a) => { const n = Number(v); if (!Number.isFinite(n) || n < 0) fail(`${a} needs a number`); return n; };
  function fail(m) { console.error(`traces.mjs: ${m}`); process.exit(2); }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => (argv[i + 1] === undefined ? fail(`${a} needs a value`) : argv[++i]);
    if (a === '--traces') o.traces = path.resolve(v());
    else if (a === '--users') o.users = num(v(), a);
    else if (a === '--slots') o.slots = num(v(), a);
    else if (a === '--seed') o.seed = num(v(), a);
    else if (a === '--requests') o.maxRequests = num(v(), a);
    else if (a === '--max-prompt') o.maxPromptTokens = num(v(), a);
    else if (a === '--block-tokens') o.blockTokens = num(v(), a);
    else if (a === '--subagents') o.subagentsOnly = true;
    else if (a === '--no-subagents') o.subagents = false;
    else if (a === '--think-scale') o.thinkScale = num(v(), a);
    else if (a === '--think-cap') o.thinkCap = num(v(), a);
    else if (a === '--stagger') o.stagger = num(v(), a);
    else if (a === '--max-output') o.maxTokens = num(v(), a);
    else if (a === '--arch') o.archs.push(v());
    else if (a === '--api') o.apis.push(v());
    else if (a === '--configs') o.configs = v().split(',').filter(Boolean);
    else if (a === '--restart') o.restart = v();
    else if (a === '--load') o.load = num(v(), a);
    else if (a === '--out') o.out = v();
    else fail(`unknown argument ${a}`);
  }
  if (!o.archs.length) o.archs = ['llama', 'qwen35'];
  if (!o.apis.length) o.apis = ['messages'];
  for (const c of o.configs) if (!traceConfigs[c]) fail(`unknown configuration ${c}`);
  if (!['no', 'yes', 'both'].includes(o.restart)) fail('--restart is no, yes or both');
  return o;
}

// One workload on one model: the bound, then every configuration (without, then with a restart).
export async function runTraces(o, arch, api, say) {
  const w = buildTraceWorkload(listTraces(o.traces), o);
  const model = modelPath(arch);
  const tok = await startLlama({ arch, model, slots: 1, ctx: 4096 });
  let rendered;
  try {
    rendered = await renderAll(tok.url, w, api);
  } finally {
    await tok.stop();
  }
  const longest = Math.max(...[...rendered.values()].map((t) => t.length));
  const ctxPerSlot = longest + 256;
  const bound = lowerBoundOf(rendered);
  say(`${arch} ${api}: ${w.users.length} users (${w.users.map((u) => u.trace).join(', ')}), ${w.requests} requests, ` +
    `prompts up to ${longest} tokens, lower bound ${bound}, -c ${o.slots * ctxPerSlot}`);
  const restarts = o.restart === 'both' ? [false, true] : [o.restart === 'yes'];
  const results = [];
  for (const restart of restarts) {
    for (const id of o.configs) {
      say(`${arch} ${api}: ${id}${restart ? ', restarted halfway' : ''}`);
      const r = await runTraceConfig({ arch, model, id, slots: o.slots, ctxPerSlot, w, api, restart, rendered,
        maxTokens: o.maxTokens, timeoutMs: o.timeoutMs, say });
      say(`  ${r.computed} prompt tokens computed (${(r.computed / r.bound).toFixed(2)}x bound), TTFT p50 ` +
        `${(r.ttft50 / 1000).toFixed(2)} s p95 ${(r.ttft95 / 1000).toFixed(2)} s, ${r.errors} errors, ${r.wall.toFixed(0)} s`);
      if (r.excess) say(`  excess: ${r.excess.map((g) => `${g.what}: ${g.excess} (${g.requests} req)`).join('; ')}`);
      results.push(r);
    }
  }
  const prompts = [...rendered.values()].map((t) => t.length);
  return { arch, api, w, bound, longest, ctx: o.slots * ctxPerSlot, minPrompt: Math.min(...prompts), results };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const t0 = performance.now();
  const say = (m) => process.stderr.write(`traces [${String(Math.round((performance.now() - t0) / 1000)).padStart(5)}s]: ${m}\n`);
  const load = o.load > 0 ? startLoad(o.load) : null;
  const runs = [];
  console.log(`Command: \`node tests/bench/traces.mjs ${process.argv.slice(2).join(' ')}\``);
  try {
    for (const arch of o.archs) {
      for (const api of o.apis) {
        const run = await runTraces(o, arch, api, say);
        runs.push(run);
        console.log(traceReport(run, o));
      }
    }
  } finally {
    if (load) await load.stop();
  }
  if (o.out) fs.writeFileSync(o.out, JSON.stringify(runs.map((r) => ({ ...r, w: undefined })), null, 1));
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
