// The routing benchmark's client side: a streamed chat request timed to its first token,
// prompt-token counters from /metrics, and the exact lower bound of prefill work.
import { performance } from 'node:perf_hooks';
import { postJson } from '../../integration/lib/llama.mjs';
import { readSse } from '../../integration/lib/warmslot.mjs';
import { chat } from '../../integration/lib/text.mjs';

// llama-server's count of prompt tokens it really processed (needs --metrics).
export async function promptTokensTotal(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('llamacpp:prompt_tokens_total'));
  if (!line) throw new Error(`${url}/metrics has no llamacpp:prompt_tokens_total`);
  return Number(line.trim().split(/\s+/).at(-1));
}

// Sends one request with stream:true and reads it to the end. Times, in ms from sending:
//   first    the first SSE data event of any kind;
//   content  the first data event whose delta carries text (content or reasoning_content);
//   ttft     content, or the end of the response when no event carried text.
export async function streamChat(url, request, extra = {}) {
  const body = JSON.stringify(chat(request.system, request.question, { stream: true, ...extra }));
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body,
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status} from ${url}: ${(await res.text()).slice(0, 300)}`);
  const out = {
    route: res.headers.get('x-warmslot-route'), slot: res.headers.get('x-warmslot-slot'),
    backend: res.headers.get('x-warmslot-backend'), disk: res.headers.get('x-warmslot-disk'), first: undefined, content: undefined, timings: undefined,
  };
  await readSse(res, (data) => {
    const at = performance.now() - t0;
    out.first ??= at;
    if (data === '[DONE]') return;
    const ev = JSON.parse(data);
    if (ev.error) throw new Error(`streamed error from ${url}: ${JSON.stringify(ev.error)}`);
    const delta = ev.choices?.[0]?.delta;
    if (out.content === undefined && (delta?.content || delta?.reasoning_content)) out.content = at;
    if (ev.timings) out.timings = ev.timings;
  });
  out.total = performance.now() - t0;
  out.ttft = out.content ?? out.total;
  if (!out.timings) throw new Error(`no timings in the stream from ${url}`);
  return out;
}

// The same request over the Anthropic Messages API (`/v1/messages`, streamed): the system part
// as `system`, the question as the user message. Returns what streamChat returns, with the
// prompt counts of the stream's message_start usage as `timings` (prompt_n: input_tokens,
// cache_n: cache_read_input_tokens).
export async function streamMessages(url, request, extra = {}) {
  const body = JSON.stringify({ model: 'tiny', max_tokens: 4, temperature: 0, stream: true,
    system: request.system, messages: [{ role: 'user', content: request.question }], ...extra });
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body,
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status} from ${url}: ${(await res.text()).slice(0, 300)}`);
  const out = {
    route: res.headers.get('x-warmslot-route'), slot: res.headers.get('x-warmslot-expected-slot'),
    backend: res.headers.get('x-warmslot-backend'), disk: res.headers.get('x-warmslot-disk'), first: undefined, content: undefined, timings: undefined,
  };
  await readSse(res, (data) => {
    const at = performance.now() - t0;
    out.first ??= at;
    const ev = JSON.parse(data);
    if (ev.type === 'error') throw new Error(`streamed error from ${url}: ${JSON.stringify(ev.error)}`);
    if (ev.type === 'message_start') {
      const u = ev.message?.usage ?? {};
      out.timings = { prompt_n: u.input_tokens ?? 0, cache_n: u.cache_read_input_tokens ?? 0 };
    }
    if (out.content === undefined && ev.type === 'content_block_delta' && ev.delta?.text) out.content = at;
  });
  out.total = performance.now() - t0;
  out.ttft = out.content ?? out.total;
  if (!out.timings) throw new Error(`no usage in the stream from ${url}`);
  return out;
}

async function promptTokens(url, messages, addGenerationPrompt) {
  const t = await postJson(`${url}/apply-template`, { messages, add_generation_prompt: addGenerationPrompt });
  if (t.status !== 200) throw new Error(`apply-template: ${t.status} ${JSON.stringify(t.body)}`);
  const k = await postJson(`${url}/tokenize`, { content: t.body.prompt, add_special: true, parse_special: true });
  if (k.status !== 200) throw new Error(`tokenize: ${k.status} ${JSON.stringify(k.body)}`);
  return k.body.tokens;
}

function commonPrefix(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

// The least prefill any cache could do: every request's prompt tokens (the chat template
// rendered by the server, tokenized as completions tokenize it) minus the longest token prefix
// it shares with any earlier request of the run (at least one token is always processed). This
// is "each distinct prefix processed once, plus every question": a repeated system part is
// free, and so is the start of the user turn that follows it when an earlier request had it.
// `systemOnly` is the looser figure that subtracts only a repeated system part.
// Returns { total, systemOnly, per: [{ tokens, system, shared, bound }] }.
export async function lowerBound(url, requests) {
  const systems = new Map();
  const seen = new Set();
  const earlier = [];
  const per = [];
  let total = 0;
  let systemOnly = 0;
  for (const r of requests) {
    const prompt = await promptTokens(url, chat(r.system, r.question).messages, true);
    if (!systems.has(r.key)) systems.set(r.key, await promptTokens(url, [{ role: 'system', content: r.system }], false));
    const sys = commonPrefix(systems.get(r.key), prompt);
    const shared = Math.min(prompt.length - 1, earlier.reduce((m, e) => Math.max(m, commonPrefix(e, prompt)), 0));
    const bound = prompt.length - shared;
    systemOnly += seen.has(r.key) ? prompt.length - sys : prompt.length;
    seen.add(r.key);
    earlier.push(prompt);
    per.push({ tokens: prompt.length, system: sys, shared, bound });
    total += bound;
  }
  return { total, systemOnly, per };
}

// Nearest-rank percentile of a list of numbers.
export function percentile(values, p) {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil(p * s.length) - 1)];
}
