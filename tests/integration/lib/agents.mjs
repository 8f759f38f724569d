// The real coding agents, as users run them: the Codex CLI (`codex exec`, OpenAI Responses) and
// Claude Code (`claude -p`, Anthropic Messages), installed from npm at the versions pinned in
// package.json. Each run is one session: a fresh session id, the agent's own prompt (about
// 20K tokens for Codex, 13K for Claude Code on the test models' byte tokenizer), one question.
//
// Runs are hermetic: HOME, CODEX_HOME and CLAUDE_CONFIG_DIR are in a directory of the test (one
// per user: it stays the same across that user's sessions, as a real home does, and its path is
// part of the agents' prompts), the
// agents' own network traffic (updates, telemetry, error reports) is switched off by their
// documented settings, and the only address they are given is the loopback URL under test.
// Retries stay at the agents' defaults, as users run them (llama-server closes a kept-alive
// connection after 5 s idle, and an agent that reuses it retries). Output is bounded: Claude Code asks for CLAUDE_CODE_MAX_OUTPUT_TOKENS tokens, and Codex, which
// sends no output limit, gets the llama-server default (`-n`, see agentLlamaArgs).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot, tempDir } from './procs.mjs';

const bin = (name) => path.join(repoRoot, 'tests/integration/node_modules/.bin', name);

// llama-server flags every agent test adds: a bounded answer for clients that send no limit.
export const agentLlamaArgs = ['-n', '8'];

// The coding-agent rules of the README ("Coding agents and SDKs").
export const agentRules = 'rewrite:\n  default:\n    system_messages: front\n' +
  '    volatile_lines:\n      presets: [date, time, iso_timestamp, billing_header]\n      mark: false\n';

const keep = 64 * 1024;  // bytes of each output stream kept for the report

function run(cmd, args, { cwd, env, timeoutMs }) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const out = { stdout: '', stderr: '' };
    for (const name of ['stdout', 'stderr']) {
      child[name].on('data', (d) => { out[name] = (out[name] + d.toString()).slice(-keep); });
    }
    const timer = setTimeout(() => {
      out.timedOut = true;
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
    }, timeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* its children are gone too */ }
      resolve({ code, signal, ...out });
    });
  });
}

// The environment an agent runs in: nothing of the test runner's but PATH and the locale.
function baseEnv(home) {
  return {
    PATH: process.env.PATH, LANG: 'C.UTF-8', HOME: home, TERM: 'dumb', NO_COLOR: '1',
    NO_PROXY: '*', no_proxy: '*',
  };
}

// A user's home directory for the agents (makeHome), removed with fs.rmSync when done.
export const makeHome = () => tempDir('agent-home');

// One Codex CLI session against `baseUrl` (a warmslot or llama-server root URL). `workDir` is
// the project directory the agent is started in and `home` the user's home (both paths are part
// of the prompt: keep them the same across the sessions that should share a prefix).
export async function codexSession({ baseUrl, workDir, home, question, model = 'tiny',
  apiKey = 'none', timeoutMs = 240000 }) {
  const codexHome = path.join(home, '.codex');
  fs.mkdirSync(codexHome, { recursive: true });
  fs.writeFileSync(path.join(codexHome, 'config.toml'), [
    `model = "${model}"`, 'model_provider = "local"', 'check_for_update_on_startup = false',
    '[analytics]', 'enabled = false', '[feedback]', 'enabled = false',
    '[model_providers.local]', 'name = "local"', `base_url = "${baseUrl}/v1"`,
    'wire_api = "responses"', 'env_key = "LOCAL_API_KEY"', '',
  ].join('\n'));
  const env = { ...baseEnv(home), CODEX_HOME: codexHome, LOCAL_API_KEY: apiKey };
  return run(bin('codex'), ['exec', '--skip-git-repo-check', '--sandbox', 'read-only', question],
    { cwd: workDir, env, timeoutMs });
}

// One Claude Code session (print mode) against `baseUrl`.
export async function claudeSession({ baseUrl, workDir, home, question, model = 'tiny',
  apiKey = 'none', timeoutMs = 240000 }) {
  const env = {
    ...baseEnv(home), CLAUDE_CONFIG_DIR: path.join(home, '.claude'),
    ANTHROPIC_BASE_URL: baseUrl, ANTHROPIC_API_KEY: apiKey, ANTHROPIC_MODEL: model,
    ANTHROPIC_SMALL_FAST_MODEL: model, CLAUDE_CODE_MAX_OUTPUT_TOKENS: '8',
    DISABLE_TELEMETRY: '1', DISABLE_ERROR_REPORTING: '1', DISABLE_AUTOUPDATER: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_NON_ESSENTIAL_MODEL_CALLS: '1',
  };
  return run(bin('claude'), ['-p', question, '--model', model], { cwd: workDir, env, timeoutMs });
}

export const agents = { codex: codexSession, claude: claudeSession };
