// The coding-agent workload of the routing benchmark (`--workload agent`): sessions of a coding
// agent replayed over Anthropic Messages (`POST /v1/messages`, streamed), as such agents send
// them: system blocks (a billing line whose hash changes per request, then a long system prompt
// marked with cache_control), a tool list of about 60 KB, a first user message with a dated
// <system-reminder> and the question, then a long system-role message (the agent list) after it,
// then assistant tool calls and tool results. Three new sessions, a llama-server restart, and a
// fourth session, against llama-server alone, warmslot with its default configuration, and
// warmslot with the coding-agent rules (`system_messages: front`, dated lines moved).
import { performance } from 'node:perf_hooks';
import { restartLlama, startLlama } from '../../integration/lib/llama.mjs';
import { waitFor } from '../../integration/lib/procs.mjs';
import { readSse, startWarmslot } from '../../integration/lib/warmslot.mjs';
import { makeDocument, rng } from '../../integration/lib/text.mjs';
import { promptTokensTotal } from './client.mjs';

const sizes = {
  tiny: { system: 10000, agents: 6000, tools: 60, toolBytes: 1000, calls: 3, result: 1500 },
  bench: { system: 2500, agents: 1500, tools: 20, toolBytes: 600, calls: 2, result: 500 },
};

export const agentPreset = 'rewrite:\n  default:\n    system_messages: front\n' +
  '    volatile_lines:\n      presets: [date, time, iso_timestamp, billing_header]\n      mark: false\n';

const hex = (r, n) => Array.from({ length: n }, () => Math.floor(r() * 16).toString(16)).join('');

function toolList(s) {
  return Array.from({ length: s.tools }, (_, i) => ({
    name: `tool_${i}`,
    description: makeDocument(5000 + i, s.toolBytes).replace(/\n/g, ' '),
    input_schema: { type: 'object', properties: { path: { type: 'string' }, n: { type: 'integer' } }, required: ['path'] },
  }));
}

// Session `i`'s calls: each one the whole conversation so far, as the agent sends it.
function sessionCalls(i, s, shared, r) {
  const question = `Session ${i + 1}: please fix the failing test in module ${hex(r, 6)} and explain the change.`;
  const first = { role: 'user', content: [
    { type: 'text', text: `<system-reminder>\nToday's date is 2026-12-0${i + 1}.\nContext id: ${hex(r, 12)}\n</system-reminder>` },
    { type: 'text', text: question }] };
  const agents = { role: 'system', content: shared.agents };
  const calls = [];
  const turns = [];
  for (let c = 0; c < s.calls; c++) {
    calls.push({
      model: 'agent', max_tokens: 4, temperature: 0, stream: true, tools: shared.tools,
      system: [{ type: 'text', text: `x-anthropic-billing-header: cc_version=2.1.0.e51; cc_entrypoint=cli; cch=${hex(r, 5)};` },
        { type: 'text', text: shared.system, cache_control: { type: 'ephemeral' } }],
      messages: [first, agents, ...turns],
    });
    const id = `toolu_${i}_${c}`;
    turns.push({ role: 'assistant', content: [{ type: 'text', text: 'Let me read that file.' },
      { type: 'tool_use', id, name: 'tool_1', input: { path: `src/module_${c}.cpp` } }] });
    turns.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: id,
      content: makeDocument(7000 + 10 * i + c, s.result) }] });
  }
  return calls;
}

export function buildAgentWorkload(preset) {
  const s = sizes[preset];
  const r = rng(4242);
  const shared = {
    system: `You are a coding agent working in a repository.\n${makeDocument(4100, s.system)}`,
    agents: `Available agent types:\n${makeDocument(4200, s.agents)}`,
    tools: toolList(s),
  };
  const sessions = Array.from({ length: 4 }, (_, i) => sessionCalls(i, s, shared, r));
  return {
    name: 'agent', sizes: s, sessions, restartBefore: 3,
    describe: `A coding agent over \`/v1/messages\` (streamed): system blocks of about ${s.system.toLocaleString('en-US')} ` +
      `bytes, ${s.tools} tools (about ${Math.round(s.tools * (s.toolBytes + 150) / 1000)} KB), a dated reminder and the question ` +
      `in the first user message, a system-role agent list of about ${s.agents.toLocaleString('en-US')} bytes after it, ` +
      `then ${s.calls - 1} tool round trips (${s.calls} calls per session); sessions 1 to 3, the llama-server process ` +
      'restarted, session 4; one llama-server with 2 slots and a slot directory',
    configs: [
      { id: 'alone', label: 'llama-server -np 2 (default --cache-ram)' },
      { id: 'ws', label: '**warmslot** (default configuration) + llama-server -np 2', warmslot: true },
      { id: 'wsp', label: '**warmslot** with the coding-agent rules + llama-server -np 2', warmslot: true, extra: agentPreset },
    ],
  };
}

// One streamed Messages call: the prompt size from message_start's usage.
async function send(url, body) {
  const res = await fetch(`${url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status} from ${url}: ${(await res.text()).slice(0, 300)}`);
  const out = { route: res.headers.get('x-warmslot-route'), disk: res.headers.get('x-warmslot-disk'),
    rewrites: res.headers.get('x-warmslot-rewrites'), prompt: undefined };
  await readSse(res, (data) => {
    const ev = JSON.parse(data);
    if (ev.type === 'error') throw new Error(`streamed error: ${data}`);
    const u = ev.type === 'message_start' ? ev.message?.usage : undefined;
    if (u) out.prompt = u.input_tokens + u.cache_read_input_tokens;
  });
  if (out.prompt === undefined) throw new Error('no message_start usage in the stream');
  return out;
}

async function corrections(ws) {
  const m = (await (await fetch(`${ws.url}/metrics`)).text()).match(/warmslot_belief_corrections_total (\d+)/);
  return Number(m[1]);
}

export async function runAgentConfig(opts, model, w, config, say) {
  let llama = await startLlama({ arch: opts.arch, model, slots: 2, ctx: 32768 });
  let ws = null;
  try {
    if (config.warmslot) {
      ws = await startWarmslot({ backends: [{ name: 'b1', url: llama.url, slotSaveDir: llama.saveDir }], extra: config.extra ?? '' });
      await waitFor('warmslot to route', async () => (await (await fetch(`${ws.url}/health`)).json()).backends?.[0]?.routing, 60000);
    }
    const records = [];
    const t0 = performance.now();
    for (let si = 0; si < w.sessions.length; si++) {
      if (si === w.restartBefore) {
        const seen = ws ? await corrections(ws) : 0;
        llama = await restartLlama(llama);
        if (ws) await waitFor('warmslot to notice the restart', async () => (await corrections(ws)) > seen, 30000);
      }
      for (let ci = 0; ci < w.sessions[si].length; ci++) {
        const before = await promptTokensTotal(llama.url);
        const r = await send(ws ? ws.url : llama.url, w.sessions[si][ci]);
        const computed = (await promptTokensTotal(llama.url)) - before;
        records.push({ session: si + 1, call: ci + 1, computed, ...r });
        say(`  session ${si + 1} call ${ci + 1}: ${computed} of ${r.prompt} prompt tokens computed` +
          (r.route ? ` (${r.route}${r.disk ? `, ${r.disk}` : ''}${r.rewrites ? `, rewrites: ${r.rewrites}` : ''})` : ''));
      }
    }
    return { config, records, wall: (performance.now() - t0) / 1000, log: ws?.logFile ?? null };
  } finally {
    if (ws) await ws.stop().catch(() => {});
    await llama.stop();
  }
}

const fmtInt = (n) => Math.round(n).toLocaleString('en-US');
const pct = (a, b) => `${((100 * a) / b).toFixed(1)}%`;

export function agentReport(w, results, ctx) {
  const sessions = w.sessions.length;
  const firstOf = (r, s) => r.records.find((x) => x.session === s && x.call === 1);
  const sessionSum = (r, s) => r.records.filter((x) => x.session === s).reduce((a, x) => a + x.computed, 0);
  const head = Array.from({ length: sessions }, (_, i) => `session ${i + 1}${i + 1 === w.restartBefore + 1 ? ' (after the restart)' : ''}`);
  const lines = [
    `### agent (${ctx.arch}, ${ctx.preset} preset, load=${ctx.load ?? 0})`, '', `${w.describe}.`, '',
    'Prompt tokens computed by llama-server (its `/metrics`) for the first call of each session, as a share of that ' +
    'call\'s prompt, and for all calls of the session:', '',
    `| configuration | ${head.map((h) => `${h}: first call`).join(' | ')} | ${head.map((h) => `${h}: all calls`).join(' | ')} | wall s |`,
    `|---|${head.map(() => '---:').join('|')}|${head.map(() => '---:').join('|')}|---:|`,
  ];
  for (const r of results) {
    const firsts = head.map((_, i) => { const f = firstOf(r, i + 1); return `${fmtInt(f.computed)} of ${fmtInt(f.prompt)} (${pct(f.computed, f.prompt)})`; });
    const sums = head.map((_, i) => fmtInt(sessionSum(r, i + 1)));
    lines.push(`| ${r.config.label} | ${firsts.join(' | ')} | ${sums.join(' | ')} | ${r.wall.toFixed(1)} |`);
  }
  const by = Object.fromEntries(results.map((r) => [r.config.id, r]));
  const check = (ok, text) => lines.push(`- ${ok ? 'PASS' : 'FAIL'}: ${text}`);
  lines.push('');
  if (by.wsp) {
    lines.push('Targets for warmslot with the coding-agent rules:', '');
    for (let s = 2; s <= sessions; s++) {
      const f = firstOf(by.wsp, s);
      const what = s === w.restartBefore + 1 ? 'the first session after the restart' : `new session ${s}`;
      check(f.computed <= 0.1 * f.prompt, `${what} computes at most 10% of its prompt: ${pct(f.computed, f.prompt)}`);
    }
  }
  if (by.ws && by.alone) {
    lines.push('', 'Targets for warmslot with its default configuration:', '');
    for (let s = 1; s <= sessions; s++) {
      const a = sessionSum(by.alone, s);
      const b = sessionSum(by.ws, s);
      check(b <= a, `session ${s}: never more than llama-server alone: ${fmtInt(b)} vs ${fmtInt(a)}`);
    }
  }
  lines.push('');
  for (const r of results.filter((x) => x.config.warmslot)) {
    const routes = r.records.map((x) => `${x.session}.${x.call}: ${x.route}${x.disk ? `, ${x.disk}` : ''}`).join('; ');
    lines.push(`Routes of ${r.config.label.replace(/\*\*/g, '')}: ${routes}.`);
  }
  lines.push('');
  return lines.join('\n');
}
