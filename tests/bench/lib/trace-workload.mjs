// The trace replay's workload: real coding-agent traces (the format of ../shared/traces, see its
// README) turned into users whose requests carry deterministic text. Pure: no servers.
//
// A trace lists, per request, the 64-token blocks of its prompt as ids. Each id becomes a block
// of `blockTokens` bytes of text (one token per byte on the test models' byte-level vocabulary):
// the same id, the same text. The blocks of the tools and system prompt at the start of a
// session become the text of that position in one shared system prompt (one for the main agent,
// one per sub-agent type), as real sessions of the same client share theirs; every other id is
// text of its own trace. A request's blocks after the system prompt are laid out as messages so
// that two requests that share blocks render a shared prefix: the messages of the previous
// request that it repeats, then its new blocks as an assistant turn (the previous answer, about
// as long as it was) and a user turn (the tool results).
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { rng } from '../../integration/lib/text.mjs';

const traceBlock = 64;  // the block size of the trace format
const words = ('the of and to in is that for it as was with be by on not this are or from at which ' +
  'file test code line error build read edit path return value type list call function module ' +
  'change diff patch check run output result string number object array index cache state').split(' ');

// `n` bytes of text for a block key: words from a generator seeded by the key, ending in a space.
export function blockText(key, n) {
  const seed = crypto.createHash('sha1').update(key).digest().readUInt32LE(0);
  const r = rng(seed);
  let s = '';
  while (s.length < n - 1) s += `${words[Math.floor(r() * words.length)]} `;
  s = s.slice(0, n - 1);
  return `${s}${r() < 0.2 ? '\n' : ' '}`;
}

export function listTraces(dir) {
  if (!fs.existsSync(dir)) throw new Error(`trace directory ${dir} does not exist`);
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
  if (!files.length) throw new Error(`no *.json traces in ${dir}`);
  return files.map((f) => ({ file: f, ...JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) }));
}

const isRequest = (r) => r.type !== 'subagent';
const systemBlocks = (agent) => Math.ceil(((agent.tool_tokens ?? 0) + (agent.system_tokens ?? 0)) / traceBlock);

// One agent's session (the main agent or a sub-agent): its requests, in order, and the sub-agents
// it starts (consecutive ones run at the same time). `o.maxRequests` and `o.maxBlocks` cut it.
function session(trace, agent, kind, o, ids) {
  const steps = [];
  let requests = 0;
  let prev = null;
  for (const r of agent.requests) {
    if (requests >= o.maxRequests) break;
    if (!isRequest(r)) {
      if (!o.subagents) continue;
      const sub = session(trace, r, `sub:${r.subagent_type ?? 'agent'}`, o, ids);
      if (!sub.steps.length) continue;
      const gap = prev ? Math.max(0, r.t - prev.t - (prev.api_time ?? 0)) : 0;
      const last = steps.at(-1);
      if (last?.group) last.group.push(sub);  // started together: they run at the same time
      else steps.push({ group: [sub], think: gap });
      continue;
    }
    if (r.hash_ids.length > o.maxBlocks) break;
    steps.push({ ids: r.hash_ids, out: r.out ?? 0, think: r.think_time ?? 0 });
    prev = r;
    requests++;
  }
  // Blocks of the tools and system prompt: the shared text of their position for this kind.
  const first = steps.find((s) => s.ids);
  const nsys = first ? Math.min(systemBlocks(agent), first.ids.length - 1) : 0;
  if (first) first.ids.slice(0, nsys).forEach((id, i) => { if (!ids.has(id)) ids.set(id, `${kind}:${i}`); });
  return { kind, name: agent.agent_id ?? 'main', nsys, steps };
}

// Lays out each request of a session as messages of block-id lists (see the header).
function layout(sess) {
  let prevMsgs = [];
  let prevOut = 0;
  for (const step of sess.steps) {
    if (!step.ids) continue;
    const rest = step.ids.slice(sess.nsys);
    const msgs = [];
    let at = 0;
    let kept = true;
    for (const m of prevMsgs) {
      const n = m.ids.length;
      let same = 0;
      while (same < n && at + same < rest.length && m.ids[same] === rest[at + same]) same++;
      if (same === n) { msgs.push(m); at += n; continue; }
      kept = false;
      // Partly repeated: a message of the same role that starts with the repeated blocks.
      if (same > 0) {
        const tail = rest.slice(at);
        if (m.role === 'assistant' && tail.length > 1) {
          msgs.push({ role: 'assistant', ids: tail.slice(0, -1) }, { role: 'user', ids: tail.slice(-1) });
        } else msgs.push({ role: 'user', ids: tail });
        at = rest.length;
      }
      break;
    }
    const fresh = rest.slice(at);
    if (fresh.length) {
      const answer = Math.min(fresh.length - 1, Math.max(1, Math.round(prevOut / traceBlock)));
      if (kept && prevMsgs.length && answer > 0) {
        msgs.push({ role: 'assistant', ids: fresh.slice(0, answer) }, { role: 'user', ids: fresh.slice(answer) });
      } else msgs.push({ role: 'user', ids: fresh });
    }
    if (!msgs.length || msgs.at(-1).role !== 'user') msgs.push({ role: 'user', ids: [] });
    step.system = step.ids.slice(0, sess.nsys);
    step.msgs = msgs;
    prevMsgs = msgs;
    prevOut = step.out;
  }
  for (const step of sess.steps) for (const sub of step.group ?? []) layout(sub);
}

function shuffle(list, r) {
  for (let i = list.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [list[i], list[j]] = [list[j], list[i]];
  }
  return list;
}

function countRequests(sess) {
  return sess.steps.reduce((n, s) => n + (s.ids ? 1 : s.group.reduce((m, g) => m + countRequests(g), 0)), 0);
}

// Picks `o.users` traces with the seed (only traces with sub-agents when `o.subagentsOnly`) and
// builds their sessions. Options: users, seed, maxRequests (per agent), maxPromptTokens,
// blockTokens, subagents (replay sub-agents), subagentsOnly, thinkScale, thinkCap (s), stagger (s).
export function buildTraceWorkload(traces, o) {
  const maxBlocks = Math.floor(o.maxPromptTokens / o.blockTokens);
  const opts = { ...o, maxBlocks };
  const usable = traces.filter((t) => {
    const first = t.requests.find(isRequest);
    if (!first || first.hash_ids.length > maxBlocks) return false;
    return !o.subagentsOnly || t.requests.some((r) => !isRequest(r));
  });
  if (usable.length < o.users) throw new Error(`only ${usable.length} usable traces for ${o.users} users`);
  const picked = shuffle([...usable], rng(o.seed)).slice(0, o.users);
  const users = picked.map((t, i) => {
    const ids = new Map();
    const main = session(t, t, 'main', opts, ids);
    layout(main);
    const text = (id) => blockText(ids.get(id) ?? `${t.id ?? t.file}:${id}`, o.blockTokens);
    return { id: `u${i + 1}`, trace: t.id ?? t.file, start: i * o.stagger, main, text, requests: countRequests(main) };
  });
  const think = (s) => Math.min(o.thinkCap, s * o.thinkScale);
  return { users, think, requests: users.reduce((n, u) => n + u.requests, 0), options: o };
}

// The billing line Claude Code puts first in `system`; llama-server renders it with cch=fffff.
const billing = (cch) => `x-anthropic-billing-header: cc_version=2.1.0.e51; cc_entrypoint=cli; cch=${cch};`;

// A request's prompt as text: { system, msgs: [{ role, content }] }.
export function renderTexts(user, step) {
  const join = (list) => list.map(user.text).join('');
  return { system: join(step.system), msgs: step.msgs.map((m) => ({ role: m.role, content: join(m.ids) || '(continue)' })) };
}

// The request body as the client sends it: Anthropic Messages as Claude Code sends it (system
// blocks: the billing line, then the system prompt marked with cache_control; the last block of
// the last message marked too; streamed), or the same conversation over Chat Completions.
export function requestBody(api, texts, { maxTokens, cch }) {
  if (api === 'messages') {
    const messages = texts.msgs.map((m, i) => ({ role: m.role, content: [{ type: 'text', text: m.content,
      ...(i === texts.msgs.length - 1 ? { cache_control: { type: 'ephemeral' } } : {}) }] }));
    return { model: 'claude-opus-4-5', max_tokens: maxTokens, temperature: 0, stream: true,
      system: [{ type: 'text', text: billing(cch) }, { type: 'text', text: texts.system, cache_control: { type: 'ephemeral' } }],
      messages };
  }
  return { model: 'claude-opus-4-5', max_tokens: maxTokens, temperature: 0, stream: true,
    messages: [{ role: 'system', content: texts.system }, ...texts.msgs] };
}

// The Chat Completions messages that llama-server renders for the same request (Messages: the
// system blocks joined, the billing line's cch as llama-server rewrites it): the lower bound's input.
export function renderedMessages(api, texts) {
  const system = api === 'messages' ? billing('fffff') + texts.system : texts.system;
  return [{ role: 'system', content: system }, ...texts.msgs];
}
