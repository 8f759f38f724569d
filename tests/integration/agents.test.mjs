// The real coding agents through warmslot never pay more than straight to llama-server: the
// Codex CLI (OpenAI Responses) and Claude Code (Anthropic Messages), installed from npm at pinned
// versions, three sessions each with a llama-server restart before the third, on the plain and
// the hybrid test model, with warmslot's default config and with the coding-agent rules, and with
// llama.cpp's real Qwen3.5 template. opencode and Qwen Code (Chat Completions) run on the hybrid
// model with the default config, and are compared with the straight numbers stored for their
// pinned versions (tests/integration/agent-baselines.json, written by tests/bench/agents.mjs
// --write-baselines) instead of a straight series of their own. Tokens are llama-server's own
// /metrics.
//
// Targets, per agent and model: through warmslot, session 2 and the session after the restart
// each compute at most what llama-server alone computes for session 2, plus 64; no session
// computes more than llama-server alone's same session (plus 64 for opencode and Qwen Code).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { makeProject, qwen35Template, runSeries, sameSessionSlack, served, storedBaseline }
  from './lib/agent-series.mjs';

const slack = 64;
const log = (line) => console.log(`# ${line}`);

function assertServed(series, what) {
  series.sessions.forEach((s, i) => {
    assert.ok(served(s),
      `${what} session ${i + 1}: the agent failed (exit ${s.code}${s.timedOut ? ', timed out' : ''}):\n${s.stderr}\n${s.stdout}`);
  });
}

// Access lines of requests whose client read the whole answer: none may say client_gone.
function assertNoClientGone(series, what) {
  const gone = series.wsLog.split('\n').filter((l) => /access/.test(l) && /client_gone/.test(l));
  assert.deepEqual(gone, [], `${what}: requests of agents that exited 0 were logged as client_gone`);
}

// `a`: llama-server alone's tokens per session. The rules move the volatile lines without a
// wrapper (`mark: false`): no session, its first included, may cost more than straight to
// llama-server (plus the agent's sameSessionSlack).
function assertTargets(agent, a, through, what) {
  const w = through.sessions.map((s) => s.computed);
  const bound = a[1] + slack;
  assert.ok(w[1] <= bound, `${what}: session 2 computed ${w[1]}, bound ${bound} (alone ${a}, warmslot ${w})`);
  assert.ok(w[2] <= bound, `${what}: the session after the restart computed ${w[2]}, bound ${bound} (alone ${a}, warmslot ${w})`);
  for (const [i, n] of w.entries()) {
    const same = a[i] + sameSessionSlack[agent];
    assert.ok(n <= same, `${what}: session ${i + 1} computed ${n}, bound ${same} (alone ${a}, warmslot ${w})`);
  }
}

for (const arch of ['llama', 'qwen35']) {
  for (const agent of ['codex', 'claude']) {
    test(`${agent} on ${arch}: sessions through warmslot cost no more than straight to llama-server`, { timeout: 1500000 }, async () => {
      const project = makeProject();
      try {
        const alone = await runSeries({ agent, arch, mode: 'alone', ...project, log });
        assertServed(alone, 'llama-server alone');
        for (const mode of ['default', 'rules']) {
          const through = await runSeries({ agent, arch, mode, ...project, log });
          assertServed(through, `warmslot ${mode}`);
          assertNoClientGone(through, `warmslot ${mode}`);
          assertTargets(agent, alone.sessions.map((s) => s.computed), through, `${agent} ${arch} warmslot ${mode}`);
        }
      } finally {
        project.remove();
      }
    });
  }
}

// The straight numbers of these agents are measured once per pinned version, not on every run:
// only warmslot's default config runs here. The benchmark runs both models, with the rules too.
for (const agent of ['opencode', 'qwen']) {
  test(`${agent} on qwen35: sessions through warmslot cost no more than the stored straight baseline`, { timeout: 900000 }, async () => {
    const alone = storedBaseline(agent, 'qwen35');
    const project = makeProject();
    try {
      const through = await runSeries({ agent, arch: 'qwen35', mode: 'default', ...project, log });
      assertServed(through, 'warmslot default');
      assertNoClientGone(through, 'warmslot default');
      assertTargets(agent, alone, through, `${agent} qwen35 warmslot default`);
    } finally {
      project.remove();
    }
  });
}

// llama.cpp's Qwen3.5 template renders the tools into the prompt and refuses a system message
// anywhere but first: Claude Code sends one after the first user turn, the Codex CLI sends two
// developer items (two system messages); straight to llama-server both
// get HTTP 500, and with the rules warmslot serves them. The template cannot render the stable
// prefix alone (no user query), so warmslot cuts it where the question's turn begins: the
// session after a restart is restored, and the next question still finds the checkpoint
// llama-server makes where the last user message starts.
for (const agent of ['claude', 'codex']) {
  test(`${agent} with the real Qwen3.5 template and the rules: served, and the session after a restart is restored`, { timeout: 1500000 }, async () => {
    const project = makeProject();
    const template = qwen35Template();
    try {
      const through = await runSeries({ agent, arch: 'qwen35', mode: 'rules', template, ...project, log });
      assertServed(through, 'warmslot rules');
      assertNoClientGone(through, 'warmslot rules');
      const w = through.sessions.map((s) => s.computed);
      assert.ok(w[1] * 4 < w[0], `session 2 computed ${w[1]} of the first session's ${w[0]}`);
      assert.ok(w[2] <= w[1] + slack, `the session after the restart computed ${w[2]}, session 2 ${w[1]} (${w})`);
      assert.match(through.wsLog, /disk="restored \d+ tokens/, 'a slot file was restored after the restart');
    } finally {
      project.remove();
    }
  });
}
