// A series of real agent sessions, as a user has them: three sessions in one project directory,
// a llama-server restart between the second and the third. What each session cost is read from
// llama-server's /metrics (every prompt token it computed, warmslot's own priming and probes
// included), for llama-server alone or behind warmslot. Shared by tests/integration/agents.test.mjs
// and the benchmark tests/bench/agents.mjs.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { getJson, llamaServerBin, modelPath, restartLlama, startLlama } from './llama.mjs';
import { repoRoot, tempDir, waitFor } from './procs.mjs';
import { startWarmslot } from './warmslot.mjs';
import { agentLlamaArgs, agentRules, agents, makeHome } from './agents.mjs';

const settings = 'routing:\n  reconcile_interval: 100ms\n';

export async function promptTokensTotal(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)?.[1] ?? NaN);
}

// The real Qwen3.5 chat template shipped in the pinned llama.cpp tree.
export function qwen35Template() {
  const dir = path.join(process.env.WARMSLOT_CACHE ?? path.join(process.env.HOME, '.cache/warmslot'),
    'llama-node-llama-cpp-3.21.1/src/models/templates/Qwen3.5-4B.jinja');
  if (!fs.existsSync(dir)) throw new Error(`no ${dir}: run tests/llama/llama-server.sh first`);
  return dir;
}

// Codex exits 0. Claude Code exits 1 when an answer stops at its output limit (the test model's
// random text never ends by itself): that message proves it received and read the whole answer.
// opencode and Qwen Code exit 0 once the answer is in, an answer cut at the output limit
// included; a request that still fails after their retries makes them print it on stderr
// ("Error: ..." and "[API Error: ...]") and exit 1.
export const served = (s) => !s.timedOut &&
  (s.code === 0 || (s.code === 1 && /response exceeded the \d+ output token maximum/.test(s.stdout)));

// The sessions' questions: one per session, the same in every mode so prompts compare.
export const questions = [
  'Session 1: what does this directory hold? Answer in one word.',
  'Session 2: name one file here. Answer in one word.',
  'Session 3: is this a git repository? Answer yes or no.',
];

// Runs the series. mode: 'alone' (the agent talks to llama-server), 'default' (warmslot with its
// default config), 'rules' (warmslot with the coding-agent rules). template: a chat template
// file for llama-server (--jinja --chat-template-file), or undefined for the model's own.
// Returns { sessions: [{ computed, code, seconds, ... }], log } and stops everything it started.
export async function runSeries({ agent, arch, mode, template, workDir, home, log = () => {} }) {
  const extra = [...agentLlamaArgs, ...(template ? ['--jinja', '--chat-template-file', template] : [])];
  let llama = await startLlama({ arch, slots: 2, ctx: 131072, extra });
  let ws = null;
  const sessions = [];
  try {
    if (mode !== 'alone') {
      ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
        extra: settings + (mode === 'rules' ? agentRules : '') });
      await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    }
    for (let i = 0; i < questions.length; i++) {
      if (i === 2) llama = await restartLlama(llama);
      const before = i === 2 ? 0 : await promptTokensTotal(llama.url);
      const start = Date.now();
      const r = await agents[agent]({ baseUrl: (ws ?? llama).url, workDir, home, question: questions[i] });
      const seconds = (Date.now() - start) / 1000;
      // A restarted server counts from 0; everything it computed since belongs to this session.
      const computed = (await promptTokensTotal(llama.url)) - before;
      const s = { computed, code: r.code, timedOut: !!r.timedOut, seconds, stdout: r.stdout.slice(-2000),
        stderr: r.stderr.slice(-4000) };
      sessions.push(s);
      log(`${agent} ${arch} ${mode} session ${i + 1}: computed ${computed} tokens in ${seconds.toFixed(1)} s (exit ${r.code})`);
    }
    const wsLog = ws ? fs.readFileSync(ws.logFile, 'utf8') : '';
    return { sessions, wsLog, llamaLog: llama.proc.logFile, wsLogFile: ws?.logFile };
  } finally {
    if (ws) await ws.stop();
    await llama.stop();
  }
}

// The user's home and the project directory the agent is started in (a few files): the same
// paths for every mode, so that every mode sees the same prompts. Returns { home, workDir, remove }.
export function makeProject() {
  const home = makeHome();
  const dir = tempDir('agent-project');
  fs.writeFileSync(path.join(dir, 'README.md'), '# demo\n\nA tiny project for agent sessions.\n');
  fs.writeFileSync(path.join(dir, 'main.c'), 'int main(void) { return 0; }\n');
  const remove = () => {
    for (const d of [home, dir]) fs.rmSync(d, { recursive: true, force: true });
  };
  return { home, workDir: dir, remove };
}

// Tokens a session through warmslot may compute beyond the same session straight to llama-server:
// none for the Codex CLI and Claude Code; the targets of opencode and Qwen Code allow 64 on every
// session, as on sessions 2 and 3.
export const sameSessionSlack = { codex: 0, claude: 0, opencode: 64, qwen: 64 };

// Straight baselines: what llama-server alone computes per session, stored for each pinned agent
// version and test model (tests/bench/agents.mjs --write-baselines), so that a test can compare
// warmslot with them without running the straight series itself. They hold for the llama-server
// build and the model file they were measured with (both recorded: another build or model fails
// the test until the baselines are written again) and for home and project paths of the same
// length (temporary directories under /tmp, the default TMPDIR).
export const baselineFile = path.join(repoRoot, 'tests/integration/agent-baselines.json');
const agentPackages = { codex: '@openai/codex', claude: '@anthropic-ai/claude-code',
  opencode: 'opencode-linux-x64', qwen: '@qwen-code/qwen-code' };

export function pinnedVersion(agent) {
  const pkg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'tests/integration/package.json'), 'utf8'));
  return pkg.dependencies[agentPackages[agent]];
}

// The llama-server build and model file straight numbers depend on.
export function backendIdentity(arch) {
  const r = spawnSync(llamaServerBin(), ['--version'], { encoding: 'utf8' });
  const commit = `${r.stdout}${r.stderr}`.match(/commit (\w+)/)?.[1] ?? 'unknown';
  return `llama.cpp ${commit}, ${path.basename(modelPath(arch))}`;
}

// Dates whose length changes from day to day, as agents write them into their prompts: Qwen Code
// writes the long US date ("Saturday, December 5, 2026") once into a session's request (its
// startup context); opencode's date ("Sat Dec 05 2026") keeps its length. On the test models'
// byte tokenizer a character is a token, so a session straight to llama-server computes at most
// `mentions` tokens more per character the date has grown since the baseline was measured.
const longDate = (d) => d.toLocaleDateString('en-US', { weekday: 'long', year: 'numeric', month: 'long', day: 'numeric' });
const volatileDates = { qwen: { mentions: 1, format: longDate } };

export function dateGrowth(agent, recorded, now = new Date()) {
  const v = volatileDates[agent];
  if (!v) return 0;
  const then = new Date(`${recorded}T12:00:00`);
  return Math.max(0, v.format(now).length - v.format(then).length) * v.mentions;
}

const readBaselines = () => (fs.existsSync(baselineFile) ? JSON.parse(fs.readFileSync(baselineFile, 'utf8')) : {});

// The stored straight per-session tokens of `agent` at its pinned version on `arch`, grown by
// what today's date adds; throws with the command that writes them when there are none.
export function storedBaseline(agent, arch) {
  const version = pinnedVersion(agent);
  const entry = readBaselines()[agent]?.[version]?.[arch];
  const write = `node tests/bench/agents.mjs --agent ${agent} --arch ${arch} --write-baselines`;
  if (!entry) {
    throw new Error(`no straight baseline for ${agent} ${version} on ${arch} in ${path.relative(repoRoot, baselineFile)}: rerun \`${write}\``);
  }
  const backend = backendIdentity(arch);
  if (entry.backend !== backend) {
    throw new Error(`the straight baseline for ${agent} ${version} on ${arch} was measured with ${entry.backend}, this is ${backend}: rerun \`${write}\``);
  }
  const grown = dateGrowth(agent, entry.recorded);
  return entry.sessions.map((n) => n + grown);
}

// Stores straight per-session tokens (`sessions`, numbers) measured today.
export function writeBaseline(agent, arch, sessions) {
  const all = readBaselines();
  const version = pinnedVersion(agent);
  all[agent] ??= {};
  all[agent][version] ??= {};
  all[agent][version][arch] = { sessions, backend: backendIdentity(arch),
    recorded: new Date().toLocaleDateString('en-CA') };
  // One line per count list keeps the file's diffs to the numbers that changed.
  const text = JSON.stringify(all, null, 2).replace(/\[\s+([\d,\s]+?)\s+\]/g,
    (_, list) => `[${list.split(/,\s*/).join(', ')}]`);
  fs.writeFileSync(baselineFile, `${text}\n`);
}
