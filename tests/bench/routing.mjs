// The routing benchmark: replays seeded request sequences against llama-server alone (several
// cache settings) and against warmslot in front of it, side by side in one run, and prints per
// workload a table of prompt tokens processed, time to first token and wall time.
//
//   node tests/bench/routing.mjs [--workload NAME]... [--preset tiny|bench] [--arch llama|qwen35]
//                                [--load N] [--all] [--write-doc] [--out DIR] [--extra-configs]
//                                [--warmslot-runs N] [--long-tokens N]
//
//   --workload  interleaved | docqa | messages | replicas | restart | agent | long (repeatable or
//               comma-separated; default: all)
//   --preset    tiny (default; all workloads in a few minutes on 2 cores) | bench (the larger
//               model, ~220 prompt tokens/s on 2 cores: smaller workloads, run one at a time)
//   --arch      llama (plain attention, default) | qwen35 (hybrid Gated DeltaNet + attention)
//   --load N    keep N cores busy with busy-loop processes while the workloads run (default 0)
//   --all       every workload on both models, idle and with --load N (default 1; `long` idle
//               only), then --write-doc; --workload still narrows the workloads
//   --write-doc replace this run's tables in the routing section of docs/benchmarks.md
//   --out       directory for per-request details (default: a new temporary directory)
//   --extra-configs  also warmslot in front of --cache-ram 0 servers (no targets; diagnosis)
//   --warmslot-runs N  replays of each warmslot configuration, the median is shown (default 3)
//   --long-tokens N  the long workload's document: about N tokens (default 130000, the whole
//               context); a shorter one runs in minutes, for investigating restores; its tables
//               are printed only (not with --write-doc or --all)
//
// WARMSLOT_BIN selects the warmslot binary (default build/proxy/warmslot). Every process is
// started on 127.0.0.1 and stopped at the end, also on error. Targets are printed with
// PASS/FAIL; the exit status only says whether the benchmark could run.
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { getJson, modelPath, postJson, startLlama } from '../integration/lib/llama.mjs';
import { repoRoot, sleep, tempDir, waitFor } from '../integration/lib/procs.mjs';
import { startWarmslot, warmslotBin } from '../integration/lib/warmslot.mjs';
import { lowerBound, percentile, promptTokensTotal, streamChat, streamMessages } from './lib/client.mjs';
import { allWorkloadNames, buildWorkload } from './lib/workloads.mjs';
import { agentReport, buildAgentWorkload, runAgentConfig } from './lib/agent.mjs';
import { writeDoc } from './lib/doc.mjs';
import { startLoad } from './lib/load.mjs';
import { defaultLongTokens, maxLongTokens, runLong } from './lib/long.mjs';

function usage(code) {
  const text = fs.readFileSync(new URL(import.meta.url), 'utf8').split('\n').slice(3, 27)
    .map((l) => l.replace(/^\/\/ ?/, '')).join('\n');
  (code ? process.stderr : process.stdout).write(`${text}\n`);
  process.exit(code);
}

function parseArgs(argv) {
  const o = { workloads: [], preset: 'tiny', arch: 'llama', writeDoc: false, out: null, extraConfigs: false,
    warmslotRuns: 3, load: 0, loadGiven: false, all: false, archGiven: false, longTokens: defaultLongTokens };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = a.includes('=') ? a.slice(a.indexOf('=') + 1) : argv[++i];
      if (v === undefined) { console.error(`routing.mjs: ${a} needs a value`); usage(2); }
      return v;
    };
    const name = a.split('=')[0];
    if (name === '--workload') o.workloads.push(...value().split(',').filter(Boolean));
    else if (name === '--preset') o.preset = value();
    else if (name === '--arch') { o.arch = value(); o.archGiven = true; }
    else if (name === '--load') {
      o.load = Number.parseInt(value(), 10);
      o.loadGiven = true;
      if (!(o.load >= 0 && o.load <= 64)) { console.error('routing.mjs: --load needs a number of cores (0 to 64)'); usage(2); }
    }
    else if (name === '--out') o.out = value();
    else if (name === '--warmslot-runs') o.warmslotRuns = Math.max(1, Number.parseInt(value(), 10) || 1);
    else if (name === '--long-tokens') {
      const v = value();
      o.longTokens = /^\d+$/.test(v) ? Number(v) : NaN;
      if (!(o.longTokens >= 4000 && o.longTokens <= maxLongTokens)) {
        console.error(`routing.mjs: --long-tokens needs a number of tokens from 4000 to ${maxLongTokens}`);
        usage(2);
      }
    }
    else if (a === '--write-doc') o.writeDoc = true;
    else if (a === '--all') { o.all = true; o.writeDoc = true; }
    else if (a === '--extra-configs') o.extraConfigs = true;
    else if (a === '-h' || a === '--help') usage(0);
    else { console.error(`routing.mjs: unknown argument ${a}`); usage(2); }
  }
  if (!o.workloads.length) o.workloads = [...allWorkloadNames];
  for (const w of o.workloads) {
    if (!allWorkloadNames.includes(w)) { console.error(`routing.mjs: unknown workload ${w}`); usage(2); }
  }
  if (!['tiny', 'bench'].includes(o.preset)) { console.error(`routing.mjs: unknown preset ${o.preset}`); usage(2); }
  if (!['llama', 'qwen35'].includes(o.arch)) { console.error(`routing.mjs: unknown arch ${o.arch}`); usage(2); }
  // The documentation's long tables are the whole context's; a shorter document's are printed.
  if (o.longTokens !== defaultLongTokens && o.writeDoc) {
    console.error('routing.mjs: --long-tokens is for runs that print their tables: not with --write-doc or --all');
    usage(2);
  }
  return o;
}

const started = performance.now();
const say = (m) => process.stderr.write(`routing [${String(Math.round((performance.now() - started) / 1000)).padStart(4)}s]: ${m}\n`);
const fmtInt = (n) => Math.round(n).toLocaleString('en-US');
const fmtMs = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`);

// Route header without the wait time: "hit; waited_ms=12" counts as "hit (waited)".
function routeKind(route) {
  if (!route) return 'none';
  const waited = /waited_ms=/.test(route);
  const base = route.split(';').map((p) => p.trim()).filter((p) => p && !p.startsWith('waited_ms=')).join('; ');
  return waited ? `${base} (waited)` : base;
}

async function stopAll(ws, servers) {
  const errors = [];
  if (ws) await ws.stop().catch((e) => errors.push(e));
  for (const s of servers) await s.stop().catch((e) => errors.push(e));
  if (errors.length) throw errors[0];
}

// The restart workload's first half: the documents are warmed (warmslot: POST /admin/warm;
// llama-server alone: one question per document), then every llama-server process is restarted
// on its port with its slot directory. Replaces the entries of `servers` in place.
async function warmAndRestart(opts, model, workload, config, servers, ws) {
  const questionFor = (d) => `Warm-up question on document ${d + 1}?`;
  for (let d = 0; d < workload.docs.length; d++) {
    if (ws) {
      const r = await postJson(`${ws.url}/admin/warm`, { model: workload.model, system: workload.docs[d] });
      if (r.status !== 200 || !(r.body.saved || r.body.reason === 'already on disk')) {
        throw new Error(`warming document ${d + 1}: ${r.status} ${JSON.stringify(r.body)}`);
      }
    } else {
      await streamChat(servers[0].url, { system: workload.docs[d], question: questionFor(d) }, { model: workload.model });
    }
  }
  const corrections = async () => Number((await (await fetch(`${ws.url}/metrics`)).text())
    .match(/warmslot_belief_corrections_total (\d+)/)[1]);
  const seen = ws ? await corrections() : 0;
  for (let i = 0; i < servers.length; i++) {
    const s = servers[i];
    await s.stop();
    servers[i] = await startLlama({ arch: opts.arch, model, slots: config.slots, extra: config.extra,
      slotSaveDir: s.saveDir, port: s.port });
  }
  // warmslot learns of the restart from GET /slots: the slots it believed full are empty.
  if (ws) await waitFor('warmslot to notice the restart', async () => (await corrections()) > seen, 30000);
}

async function runConfig(opts, model, workload, config) {
  const servers = [];
  let ws = null;
  try {
    for (let i = 0; i < workload.replicas; i++) {
      servers.push(await startLlama({ arch: opts.arch, model, slots: config.slots, extra: config.extra }));
    }
    const atStart = await Promise.all(servers.map((s) => promptTokensTotal(s.url)));
    if (config.warmslot) {
      // Slot files only where the workload is about them: snapshots cost a little time.
      ws = await startWarmslot({ backends: servers.map((s, i) => ({ name: `b${i + 1}`, url: s.url,
        slotSaveDir: workload.restart ? s.saveDir : undefined })),
      // The bench preset's documents are shorter than the default 2,048-token threshold.
      extra: workload.restart ? 'cache:\n  min_prefix_tokens: 512\n' : '' });
      await waitFor('warmslot to route every backend', async () => {
        const h = await getJson(`${ws.url}/health`);
        return h.body.backends?.filter((b) => b.routing).length >= servers.length;
      }, 60000);
    }
    if (workload.restart) await warmAndRestart(opts, model, workload, config, servers, ws);
    // Counted from here: warmslot's start-up probe (a few tokens per backend, once per backend
    // start) is reported apart, as `startup`; so are the restart workload's warm-ups.
    const before = await Promise.all(servers.map((s) => promptTokensTotal(s.url)));
    const records = [];
    const t0 = performance.now();
    for (let i = 0; i < workload.requests.length; i++) {
      const req = workload.requests[i];
      const backend = servers[i % servers.length];
      const send = config.api === 'messages' ? streamMessages : streamChat;
      const r = await send(ws ? ws.url : backend.url, req, workload.model ? { model: workload.model } : {});
      records.push({
        i, kind: req.kind, key: req.key, to: ws ? 'warmslot' : `b${(i % servers.length) + 1}`,
        route: r.route, slot: r.slot, backend: r.backend, disk: r.disk, processed: r.timings.prompt_n,
        cached: r.timings.cache_n, ttft_ms: r.ttft, first_event_ms: r.first, content_ms: r.content ?? null,
        total_ms: r.total,
      });
    }
    const wall = (performance.now() - t0) / 1000;
    await sleep(300);  // let the last task's counters settle
    const after = await Promise.all(servers.map((s) => promptTokensTotal(s.url)));
    const perBackend = after.map((a, i) => a - before[i]);
    return {
      config, records, wall, perBackend, startup: before.reduce((a, b, i) => a + b - atStart[i], 0),
      tokens: perBackend.reduce((a, b) => a + b, 0),
      promptN: records.reduce((a, r) => a + r.processed, 0),
      ttfts: records.map((r) => r.ttft_ms),
      noContent: records.filter((r) => r.content_ms === null).length,
      warmslotLog: ws?.logFile ?? null,
      args: servers[0].args.filter((a, i, all) => !['-m', '--port', '--slot-save-path'].includes(all[i - 1]) &&
        !['-m', '--port', '--slot-save-path'].includes(a)),
    };
  } finally {
    await stopAll(ws, servers);
  }
}

function restartTargetLines(results, bound) {
  const by = Object.fromEntries(results.map((r) => [r.config.id, r]));
  const lines = [];
  const check = (ok, text) => lines.push(`- ${ok ? 'PASS' : 'FAIL'}: ${text}`);
  const w = by.ws;
  if (!w) return lines;
  lines.push(`Targets for ${w.config.label.replace(/\*\*/g, '')}:`, '');
  const x = w.tokens / bound;
  check(x <= 1.05, `after the restart at most 1.05x the questions' own tokens: ${x.toFixed(2)}x ` +
    `(${fmtInt(w.tokens)} vs ${fmtInt(bound)})`);
  if (by.np2) {
    check(w.tokens < by.np2.tokens, `fewer tokens than ${by.np2.config.label}, which reprocesses every document: ` +
      `${fmtInt(w.tokens)} vs ${fmtInt(by.np2.tokens)} (${(by.np2.tokens / w.tokens).toFixed(1)}x fewer)`);
  }
  return lines;
}

function targetLines(results, bound) {
  const by = Object.fromEntries(results.map((r) => [r.config.id, r]));
  const lines = [];
  const check = (ok, text) => lines.push(`- ${ok ? 'PASS' : 'FAIL'}: ${text}`);
  for (const [wsId, alone] of [['ws', ['np2', 'defaults']], ['ws64', ['ram64']]]) {
    const w = by[wsId];
    if (!w) continue;
    lines.push(`${lines.length ? '\n' : ''}Targets for ${w.config.label.replace(/\*\*/g, '')}:`, '');
    const x = w.tokens / bound;
    check(x <= 1.1, `at most 1.1x the lower bound: ${x.toFixed(2)}x (${fmtInt(w.tokens)} vs ${fmtInt(bound)})`);
    if (by.ram0) {
      const f = by.ram0.tokens / w.tokens;
      const best = by.ram0.tokens / bound;
      check(f >= 4, `at least 4x fewer tokens than llama-server --cache-ram 0: ${f.toFixed(1)}x fewer ` +
        `(${fmtInt(w.tokens)} vs ${fmtInt(by.ram0.tokens)})` +
        (best < 4 ? `; out of reach in this workload: the lower bound itself is ${best.toFixed(1)}x below --cache-ram 0` : ''));
    }
    for (const id of alone) {
      const a = by[id];
      if (!a) continue;
      check(w.tokens <= a.tokens, `never more tokens than ${a.config.label}: ${fmtInt(w.tokens)} vs ${fmtInt(a.tokens)}`);
    }
  }
  // The messages workload: the same requests over Messages cost no more than over chat.
  if (by.wsm && by.ws) {
    lines.push('', `Targets for ${by.wsm.config.label.replace(/\*\*/g, '')}:`, '');
    check(by.wsm.tokens <= by.ws.tokens, `no more tokens than the same requests over chat completions: ` +
      `${fmtInt(by.wsm.tokens)} vs ${fmtInt(by.ws.tokens)}`);
    if (by.np2m) {
      check(by.wsm.tokens <= by.np2m.tokens, `never more tokens than ${by.np2m.config.label}: ` +
        `${fmtInt(by.wsm.tokens)} vs ${fmtInt(by.np2m.tokens)}`);
    }
  }
  return lines;
}

// Route counts; a miss whose prompt was nevertheless mostly cached was served by llama-server's
// own RAM cache (warmslot's belief said the prefix was gone).
function routeSummary(result) {
  const counts = new Map();
  for (const r of result.records) {
    let k = routeKind(r.route).replace(/; reason=([\w-]+)/, ' ($1)');
    if (r.disk?.startsWith('restored')) k += ', restored from disk';
    else if (k.startsWith('miss') && r.cached > 0.5 * (r.cached + r.processed)) k += ', served from the RAM cache';
    counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return [...counts].sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k}: ${n}`).join('; ');
}

function report(workload, bound, results, ctx) {
  const docs = workload.requests.filter((r) => r.kind === 'doc').length;
  const chats = workload.requests.length - docs;
  const promptSum = bound.per.reduce((a, p) => a + p.tokens, 0);
  const docTokens = [...new Set(workload.requests.filter((r) => r.kind === 'doc').map((r) => r.key))]
    .map((k) => bound.per[workload.requests.findIndex((r) => r.key === k)].system);
  const lines = [
    `### ${workload.name} (${ctx.arch}, ${ctx.preset} preset, load=${ctx.load})`,
    '',
    `${workload.describe}. ${workload.requests.length} requests${chats ? ` (${docs} on documents, ${chats} short chats)` : ''}, ` +
    `sent one at a time. System parts of the documents: ${docTokens.map(fmtInt).join(', ')} tokens. ` +
    `All prompts together: ${fmtInt(promptSum)} tokens; lower bound ${fmtInt(bound.total)} ` +
    (workload.restart ? '(the questions\' own tokens: every prompt minus its document).'
      : `(${fmtInt(bound.systemOnly)} when only a repeated system part is subtracted).`),
    '',
    '| configuration | prompt tokens processed | x lower bound | median TTFT | p90 TTFT | wall s |',
    '|---|---:|---:|---:|---:|---:|',
    workload.restart
      ? `| lower bound (the questions' own tokens: every document restored for free) | ${fmtInt(bound.total)} | 1.00 | | | |`
      : `| lower bound (each system part once, plus every question) | ${fmtInt(bound.total)} | 1.00 | | | |`,
  ];
  for (const r of results) {
    lines.push(`| ${r.config.label} | ${fmtInt(r.tokens)} | ${(r.tokens / bound.total).toFixed(2)} | ` +
      `${fmtMs(percentile(r.ttfts, 0.5))} | ${fmtMs(percentile(r.ttfts, 0.9))} | ${r.wall.toFixed(1)} |`);
  }
  lines.push('', ...(workload.restart ? restartTargetLines : targetLines)(results, bound.total), '');
  for (const r of results.filter((x) => x.config.warmslot)) {
    const label = r.config.label.replace(/\*\*/g, '');
    if (r.replays.length > 1) {
      lines.push(`${label}: median of ${r.replays.length} replays; prompt tokens per replay: ` +
        `${r.replays.map(fmtInt).join(', ')}.`);
    }
    lines.push(`Routes of ${label} (the median replay): ${routeSummary(r)}` +
      ` (warmslot's start-up probe, not counted above: ${fmtInt(r.startup)} tokens).`);
  }
  if (workload.replicas > 1) {
    for (const r of results) {
      lines.push(`Prompt tokens per process, ${r.config.label.replace(/\*\*/g, '')}: ${r.perBackend.map(fmtInt).join(' + ')}.`);
    }
  }
  lines.push('');
  return lines.join('\n');
}

// The line under each table's heading names the command that reruns that table alone.
function sectionCommand(opts, workload) {
  return `node tests/bench/routing.mjs --workload ${workload} --arch ${opts.arch}` +
    (opts.preset !== 'tiny' ? ` --preset ${opts.preset}` : '') + (opts.load ? ` --load ${opts.load}` : '') +
    (opts.extraConfigs ? ' --extra-configs' : '') + (opts.warmslotRuns !== 3 ? ` --warmslot-runs ${opts.warmslotRuns}` : '') +
    (workload === 'long' && opts.longTokens !== defaultLongTokens ? ` --long-tokens ${opts.longTokens}` : '');
}

// The numbers of the summary table at the top of the section (lib/doc.mjs): warmslot's default
// configuration against llama-server alone and the lower bound.
function summaryOf(workload, bound, results, opts, load) {
  const by = Object.fromEntries(results.map((r) => [r.config.id, r]));
  if (!by.ws) return undefined;
  return { workload: workload.name, arch: opts.arch, preset: opts.preset, load: opts.load, loadavg: load,
    bound: bound.total, np2: by.np2?.tokens, defaults: by.defaults?.tokens, ws: by.ws.tokens,
    replays: by.ws.replays, target: workload.restart ? 1.05 : 1.1 };
}

// Every workload of one model and one load: the lower bounds on a tokenizer-only server, then
// each workload's configurations one after the other, with the load generator running.
async function runSuite(opts, outDir, binInfo) {
  say(`model: generating or finding ${opts.arch} (${opts.preset})${opts.load ? `; load: ${opts.load} busy cores` : ''}`);
  const model = modelPath(opts.arch, opts.preset);
  const workloads = opts.workloads.filter((w) => !['agent', 'long'].includes(w))
    .map((w) => buildWorkload(w, opts.preset, { extraConfigs: opts.extraConfigs }));

  say('computing the lower bounds on a tokenizer-only server');
  const bounds = {};
  let buildInfo = 'unknown';
  const tok = await startLlama({ arch: opts.arch, model, slots: 1 });
  try {
    buildInfo = (await getJson(`${tok.url}/props`)).body.build_info ?? buildInfo;
    for (const w of workloads) {
      bounds[w.name] = await lowerBound(tok.url, w.requests);
      // After a restart nothing is shared with earlier requests; the best is every document
      // restored from disk, so only each question's own tokens (after its system part) remain.
      if (w.restart) bounds[w.name].total = bounds[w.name].per.reduce((a, p) => a + p.tokens - p.system, 0);
    }
  } finally {
    await tok.stop();
  }

  const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/model name\s*:\s*(.*)/) ?? [])[1] ?? os.arch();
  const ctx = {
    arch: opts.arch, preset: opts.preset, load: opts.load, buildInfo, cpu: cpu.trim(),
    cores: os.availableParallelism?.() ?? os.cpus().length,
    model: path.basename(model), date: new Date().toISOString().slice(0, 10), ...binInfo,
    command: `node tests/bench/routing.mjs${commandArgs(process.argv.slice(2)).map((a) => ` ${a}`).join('')}`,
  };
  const sections = [];
  const generator = startLoad(opts.load);
  try {
    for (const w of workloads) {
      const bound = bounds[w.name];
      const results = [];
      const loads = [];
      for (const config of w.configs) {
        // llama-server alone gives the same token counts on every replay; warmslot's choices
        // depend on timing, so its configurations are replayed several times (median shown).
        const runs = [];
        const times = config.warmslot ? opts.warmslotRuns : 1;
        for (let n = 0; n < times; n++) {
          say(`${w.name}: ${config.label.replace(/\*\*/g, '')}: ${w.requests.length} requests` +
            (times > 1 ? ` (replay ${n + 1} of ${times})` : ''));
          loads.push(os.loadavg()[0]);
          const r = await runConfig(opts, model, w, config);
          loads.push(os.loadavg()[0]);
          for (let i = 0; i < r.records.length; i++) {
            const expected = bound.per[i].tokens;
            const got = r.records[i].processed + r.records[i].cached;
            if (got !== expected) say(`  note: request ${i} had ${got} prompt tokens, the tokenizer said ${expected}`);
          }
          say(`  ${fmtInt(r.tokens)} prompt tokens (sum of prompt_n ${fmtInt(r.promptN)}), ` +
            `median TTFT ${fmtMs(percentile(r.ttfts, 0.5))}, wall ${r.wall.toFixed(1)} s` +
            (r.noContent ? `, ${r.noContent} responses without text (TTFT = end of response)` : '') +
            (r.warmslotLog ? `; warmslot log ${r.warmslotLog}` : ''));
          runs.push(r);
        }
        const sorted = [...runs].sort((a, b) => a.tokens - b.tokens);
        const chosen = sorted[Math.floor((sorted.length - 1) / 2)];
        chosen.replays = runs.map((r) => r.tokens);
        chosen.allRuns = runs;
        results.push(chosen);
      }
      const text = report(w, bound, results, ctx);
      process.stdout.write(`${text}\n`);
      const load = [Math.min(...loads), Math.max(...loads)];
      sections.push({ key: sectionKey(opts, w.name), text, load, command: sectionCommand(opts, w.name),
        summary: summaryOf(w, bound, results, opts, load) });
      const detail = path.join(outDir, `${sectionKey(opts, w.name)}.json`);
      fs.writeFileSync(detail, JSON.stringify({
        ctx, workload: { name: w.name, describe: w.describe, requests: w.requests.map((r, i) => ({
          i, kind: r.kind, key: r.key, question: r.question, ...bound.per[i] })) },
        lowerBound: bound.total,
        results: results.map((r) => ({ config: r.config, tokens: r.tokens, promptN: r.promptN, perBackend: r.perBackend,
          wall: r.wall, warmslotLog: r.warmslotLog, args: r.args, records: r.records, replays: r.replays,
          runs: r.allRuns.map((x) => ({ tokens: x.tokens, perBackend: x.perBackend, wall: x.wall,
            warmslotLog: x.warmslotLog, records: x.records })) })),
      }, null, 1));
      say(`details: ${detail}`);
    }
    if (opts.workloads.includes('agent')) sections.push(await agentSection(opts, model, ctx));
    if (opts.workloads.includes('long')) {
      const s = await runLong(opts, model, ctx, say, outDir);
      process.stdout.write(`${s.text}\n`);
      sections.push({ ...s, key: sectionKey(opts, 'long'), command: sectionCommand(opts, 'long') });
    }
  } finally {
    await generator.stop();
  }
  return { sections, ctx };
}

// The command line without --out and its directory.
function commandArgs(argv) {
  return argv.filter((a, i) => !a.startsWith('--out') && argv[i - 1] !== '--out');
}

const sectionKey = (opts, workload) => `${opts.arch}-${opts.preset}-${workload}${opts.load ? `-load${opts.load}` : ''}`;

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const outDir = opts.out ?? tempDir('routing-bench');
  fs.mkdirSync(outDir, { recursive: true });
  // Every configuration of the run measures the same warmslot: a private copy of the binary,
  // so a rebuild during the run changes nothing.
  const bin = warmslotBin();
  if (!fs.existsSync(bin)) throw new Error(`no warmslot binary at ${bin} (build it, or set WARMSLOT_BIN)`);
  const binCopy = path.join(tempDir('routing-bin'), 'warmslot');
  fs.copyFileSync(bin, binCopy);
  fs.chmodSync(binCopy, 0o755);
  process.env.WARMSLOT_BIN = binCopy;
  const binSha = crypto.createHash('sha256').update(fs.readFileSync(binCopy)).digest('hex').slice(0, 12);
  let commit = 'unknown';
  try {
    const git = (...a) => execFileSync('git', ['-C', repoRoot, ...a], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    commit = git('rev-parse', '--short', 'HEAD') + (git('status', '--porcelain', '--', 'proxy') ? ' with local changes in proxy/' : '');
  } catch { /* not a git checkout */ }
  say(`warmslot: ${bin} (sha256 ${binSha}), sources at ${commit}; details in ${outDir}`);

  // --all: both models, idle and loaded, then `long` (restore against the disk) idle only.
  const suites = [];
  const archs = opts.all && !opts.archGiven ? ['qwen35', 'llama'] : [opts.arch];
  const loads = opts.all ? [0, opts.loadGiven && opts.load ? opts.load : 1] : [opts.load];
  for (const arch of archs) {
    for (const load of loads) {
      const workloads = opts.workloads.filter((w) => !(opts.all && w === 'long'));
      if (workloads.length) suites.push({ ...opts, arch, load, workloads });
    }
  }
  if (opts.all && opts.workloads.includes('long')) {
    for (const arch of archs) suites.push({ ...opts, arch, load: 0, workloads: ['long'] });
  }
  for (const suite of suites) {
    const { sections, ctx } = await runSuite(suite, outDir, { commit, binSha });
    if (opts.writeDoc) {
      // Written after each model and load, so an interrupted --all keeps what it measured.
      const file = path.join(repoRoot, 'docs/benchmarks.md');
      writeDoc(file, sections, ctx);
      say(`updated ${file}`);
    }
  }
  say('done');
}

// The coding-agent workload: its own sequence (sessions over /v1/messages, a restart), each
// configuration once on fresh processes.
async function agentSection(opts, model, ctx) {
  const w = buildAgentWorkload(opts.preset);
  const results = [];
  const loads = [];
  for (const config of w.configs) {
    say(`agent: ${config.label.replace(/\*\*/g, '')}`);
    loads.push(os.loadavg()[0]);
    results.push(await runAgentConfig(opts, model, w, config, say));
    loads.push(os.loadavg()[0]);
  }
  const text = agentReport(w, results, ctx);
  process.stdout.write(`${text}\n`);
  const load = [Math.min(...loads), Math.max(...loads)];
  const by = Object.fromEntries(results.map((r) => [r.config.id, r]));
  const total = (r) => r.records.reduce((a, x) => a + x.computed, 0);
  const perSession = (r) => [...new Set(r.records.map((x) => x.session))]
    .map((s) => r.records.filter((x) => x.session === s).reduce((a, x) => a + x.computed, 0));
  const summary = by.ws && by.alone ? { workload: 'agent', arch: opts.arch, preset: opts.preset, load: opts.load,
    loadavg: load, np2: total(by.alone), ws: total(by.ws), replays: [total(by.ws)],
    neverMore: perSession(by.ws).every((t, i) => t <= perSession(by.alone)[i]) } : undefined;
  return { key: sectionKey(opts, 'agent'), text, load, command: sectionCommand(opts, 'agent'), summary };
}

main().catch((e) => {
  console.error(`routing.mjs: ${e.stack ?? e}`);
  process.exitCode = 1;
});
