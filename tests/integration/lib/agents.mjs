// The real coding agents, as users run them: the Codex CLI (`codex exec`, OpenAI Responses),
// Claude Code (`claude -p`, Anthropic Messages), opencode (`opencode run`, Chat Completions through
// a custom OpenAI-compatible provider) and Qwen Code (`qwen PROMPT`, Chat Completions), installed
// from npm at the versions pinned in package.json. Each run is one session: a fresh session id,
// the agent's own prompt (about 20K tokens for Codex, 13K for Claude Code, 10K for opencode and
// 21K for Qwen Code on the test models' byte tokenizer), one question.
//
// Runs are hermetic: HOME, the XDG directories, CODEX_HOME and CLAUDE_CONFIG_DIR are in a
// directory of the test (one per user: it stays the same across that user's sessions, as a real
// home does, and its path is part of the agents' prompts), the agents' own network traffic
// (updates, telemetry, usage statistics, model lists, error reports, package installs) is
// switched off by their documented settings, and the only address they are given is the loopback
// URL under test. Retries stay at the agents' defaults, as users run them (llama-server closes a
// kept-alive connection after 5 s idle, and an agent that reuses it retries). Output is bounded:
// Claude Code asks for CLAUDE_CODE_MAX_OUTPUT_TOKENS tokens, opencode for its model's output
// limit, Qwen Code for its settings' max_tokens, and Codex, which sends no output limit, gets
// the llama-server default (`-n`, see agentLlamaArgs). opencode and Qwen Code stop after a few
// model turns (a turn that calls a tool is followed by another).
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

// The XDG base directories of a home, where opencode keeps its config, database and caches.
function xdgEnv(home) {
  return {
    XDG_CONFIG_HOME: path.join(home, '.config'), XDG_DATA_HOME: path.join(home, '.local/share'),
    XDG_CACHE_HOME: path.join(home, '.cache'), XDG_STATE_HOME: path.join(home, '.local/state'),
  };
}

function writeJson(file, value) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);
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

// One opencode session (`opencode run`) against `baseUrl`, through a provider of the
// OpenAI-compatible SDK that opencode ships (nothing is installed for it). opencode is the Linux
// x64 build (npm opencode-linux-x64), the binary that the opencode-ai package links on an x64
// Linux machine with AVX2: opencode-ai lists every platform's build as an optional dependency,
// and the npm registry the tests install from lacks some of them (the macOS ones), which leaves
// its lock file incomplete and `npm ci` refusing it. A session sends two requests: a
// title for the session (a small-model call, which falls back to the session's model) and the
// answer. Besides the config's `autoupdate` and `share`, the environment switches off the
// models.dev list fetch and LSP downloads; opencode also installs its plugin package
// (@opencode-ai/plugin) into the config directory in the background, with npm's own client, and
// `npm_config_offline` keeps that client off the network (the install fails at once, logged as a
// warning, and the session goes on).
export async function opencodeSession({ baseUrl, workDir, home, question, model = 'tiny',
  apiKey = 'none', timeoutMs = 240000 }) {
  const xdg = xdgEnv(home);
  writeJson(path.join(xdg.XDG_CONFIG_HOME, 'opencode/opencode.json'), {
    model: `local/${model}`, autoupdate: false, share: 'disabled',
    provider: {
      local: {
        npm: '@ai-sdk/openai-compatible', name: 'local',
        options: { baseURL: `${baseUrl}/v1`, apiKey },
        models: { [model]: { name: model, limit: { context: 131072, output: 8 } } },
      },
    },
    agent: { build: { steps: 4 } },
  });
  const env = {
    ...baseEnv(home), ...xdg, OPENCODE_DISABLE_AUTOUPDATE: '1', OPENCODE_DISABLE_MODELS_FETCH: '1',
    OPENCODE_DISABLE_LSP_DOWNLOAD: '1', npm_config_offline: 'true',
  };
  const opencode = path.join(repoRoot, 'tests/integration/node_modules/opencode-linux-x64/bin/opencode');
  return run(opencode, ['run', question], { cwd: workDir, env, timeoutMs });
}

// One Qwen Code session (a one-shot prompt, no TTY) against `baseUrl`, the OpenAI auth type
// configured by OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL. The settings switch off
// updates, usage statistics (sent to a remote collector by default) and telemetry, and ask for
// 8 output tokens.
export async function qwenSession({ baseUrl, workDir, home, question, model = 'tiny',
  apiKey = 'none', timeoutMs = 240000 }) {
  writeJson(path.join(home, '.qwen/settings.json'), {
    general: { enableAutoUpdate: false },
    privacy: { usageStatisticsEnabled: false },
    telemetry: { enabled: false },
    security: { auth: { selectedType: 'openai' } },
    model: { generationConfig: { samplingParams: { max_tokens: 8 } } },
  });
  const env = {
    ...baseEnv(home), ...xdgEnv(home), OPENAI_BASE_URL: `${baseUrl}/v1`, OPENAI_API_KEY: apiKey,
    OPENAI_MODEL: model,
  };
  return run(bin('qwen'), [question, '--max-session-turns', '4'], { cwd: workDir, env, timeoutMs });
}

export const agents = { codex: codexSession, claude: claudeSession, opencode: opencodeSession, qwen: qwenSession };
