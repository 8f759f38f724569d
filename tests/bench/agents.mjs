// The real-agent benchmark: the Codex CLI, Claude Code, opencode and Qwen Code (npm, the
// versions pinned in tests/integration/package.json), three sessions each with a llama-server
// restart before the third, straight to llama-server, through warmslot with its default config,
// and through warmslot with the coding-agent rules, side by side in one run. Prints one table per
// model: prompt tokens llama-server computed per session (its /metrics) and the session's seconds.
//
//   node tests/bench/agents.mjs [--arch llama|qwen35]... [--agent codex|claude|opencode|qwen]...
//                               [--template] [--load N] [--write-baselines]
//
//   --arch      test model(s) (default: both)
//   --agent     agent(s) (default: all four)
//   --template  also run every agent on qwen35 with llama.cpp's real Qwen3.5-4B.jinja template
//               (llama-server alone answers Claude Code's late system message with HTTP 500:
//               shown as "failed")
//   --load N    keep N cores busy with busy-loop processes while the sessions run (default 0)
//   --write-baselines
//               run llama-server alone a second time, in a fresh home, and store the straight
//               per-session tokens of each agent and model in tests/integration/agent-baselines.json
//               (keyed by agent, pinned version and model), which the agent test compares warmslot
//               with; both runs must agree, else nothing is stored and the run exits 1
//
// WARMSLOT_BIN selects the warmslot binary (default build/proxy/warmslot). Every process is
// started on 127.0.0.1 and stopped at the end. Targets are printed with PASS/FAIL: through
// warmslot, sessions 2 and 3 cost at most llama-server alone's session 2 + 64 and no session more
// than llama-server alone's (+ 64 for opencode and Qwen Code).
import fs from 'node:fs';
import { makeProject, qwen35Template, runSeries, sameSessionSlack, served, writeBaseline }
  from '../integration/lib/agent-series.mjs';
import { agents } from '../integration/lib/agents.mjs';
import { startLoad } from './lib/load.mjs';

function parseArgs(argv) {
  const o = { archs: [], agents: [], template: false, load: 0, writeBaselines: false };
  const fail = (why) => {
    console.error(`agents.mjs: ${why}`);
    process.exit(2);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--arch') o.archs.push(argv[++i]);
    else if (a === '--agent') o.agents.push(argv[++i]);
    else if (a === '--template') o.template = true;
    else if (a === '--load') o.load = Number(argv[++i]);
    else if (a === '--write-baselines') o.writeBaselines = true;
    else fail(`unknown argument ${a}`);
  }
  if (!o.archs.length) o.archs = ['llama', 'qwen35'];
  if (!o.agents.length) o.agents = Object.keys(agents);
  for (const a of o.agents) if (!agents[a]) fail(`unknown agent ${a} (${Object.keys(agents).join(', ')})`);
  return o;
}

const modes = ['alone', 'default', 'rules'];
const cell = (s) => (served(s) ? `${s.computed} (${s.seconds.toFixed(1)} s)` : 'failed');

function verdict(agent, alone, w) {
  if (!alone || !alone.sessions.every(served)) return 'n/a';
  const a = alone.sessions.map((s) => s.computed);
  const c = w.sessions.map((s) => s.computed);
  const ok = w.sessions.every(served) && c[1] <= a[1] + 64 && c[2] <= a[1] + 64 &&
    c.every((n, i) => n <= a[i] + sameSessionSlack[agent]);
  return ok ? 'PASS' : 'FAIL';
}

async function table(title, rows) {
  console.log(`\n### ${title}\n`);
  console.log('| agent | setup | session 1 | session 2 | session 3 (after a restart) | target |');
  console.log('|---|---|---|---|---|---|');
  for (const { agent, results } of rows) {
    for (const mode of modes) {
      const r = results[mode];
      if (!r) continue;
      const name = mode === 'alone' ? 'llama-server alone' : `warmslot, ${mode === 'default' ? 'default config' : 'coding-agent rules'}`;
      const target = mode === 'alone' ? '' : verdict(agent, results.alone, r);
      console.log(`| ${agent} | ${name} | ${r.sessions.map(cell).join(' | ')} | ${target} |`);
    }
  }
}

// --write-baselines: a second straight series in a fresh home, as the first one had. Returns why
// nothing was stored, or null once both runs served every session and agreed on every count.
async function storeBaseline(agent, arch, first, log) {
  const project = makeProject();
  let second;
  try {
    second = await runSeries({ agent, arch, mode: 'alone', ...project, log });
  } finally {
    project.remove();
  }
  const [a, b] = [first, second].map((r) => r.sessions.map((s) => s.computed));
  if (![first, second].every((r) => r.sessions.every(served))) return `${agent} ${arch}: a straight session failed`;
  if (a.join() !== b.join()) return `${agent} ${arch}: two straight runs computed ${a} and ${b}`;
  writeBaseline(agent, arch, a);
  console.error(`${agent} ${arch}: stored straight baseline ${a}`);
  return null;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const load = o.load > 0 ? startLoad(o.load) : null;
  const log = (l) => console.error(l);
  const unstored = [];
  try {
    const runs = o.archs.map((arch) => ({ arch, title: `${arch} test model, the model's own ChatML template` }));
    if (o.template) runs.push({ arch: 'qwen35', template: qwen35Template(), title: 'qwen35 test model, llama.cpp\'s Qwen3.5-4B.jinja' });
    console.log(`Prompt tokens llama-server computed per session (its /metrics), and the session's wall time${o.load ? `; ${o.load} core(s) kept busy` : ''}.`);
    for (const run of runs) {
      const rows = [];
      for (const agent of o.agents) {
        const project = makeProject();
        const results = {};
        try {
          for (const mode of modes) {
            results[mode] = await runSeries({ agent, arch: run.arch, mode, template: run.template, ...project, log });
          }
        } finally {
          project.remove();
        }
        rows.push({ agent, results });
        if (o.writeBaselines && !run.template) {
          const why = await storeBaseline(agent, run.arch, results.alone, log);
          if (why) unstored.push(why);
        }
      }
      await table(run.title, rows);
    }
    for (const why of unstored) console.error(`no baseline stored: ${why}`);
    if (unstored.length) process.exitCode = 1;
  } finally {
    if (load) await load.stop();
  }
}

await main();
