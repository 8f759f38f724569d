// The cluster benchmark's failure step: with prefix affinity and every document on its host, h2's
// llama-server is killed while it streams an answer; then every document gets new questions,
// one at a time, and each request's outcome is timed from the kill.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { repoRoot } from '../../integration/lib/procs.mjs';
import { sleep } from '../../integration/lib/procs.mjs';
import { balancerStatus, hostPromptTokens, streamOnce } from '../../integration/lib/cluster.mjs';

// Which host served most of each document's requests.
export function docHosts(records) {
  const count = new Map();
  for (const r of records.filter((x) => x.ok)) {
    const m = count.get(r.key) ?? new Map();
    m.set(r.host, (m.get(r.host) ?? 0) + 1);
    count.set(r.key, m);
  }
  return new Map([...count].map(([k, m]) => [k, [...m].sort((a, b) => b[1] - a[1])[0][0]]));
}

// Polls HAProxy's stats until it reports `name` down; resolves to that moment (or null after
// `limitMs`).
async function watchDown(info, name, limitMs) {
  const end = performance.now() + limitMs;
  while (performance.now() < end) {
    const s = await balancerStatus(info).catch(() => ({}));
    if (s[name]?.startsWith('DOWN')) return performance.now();
    await sleep(100);
  }
  return null;
}

// A long answer on one of the victim's documents, to be in flight when the victim dies: resolves
// once a few of its tokens have arrived, with { request } (the request's promise, in an object:
// an async function that returned it would wait for it). (The test model's tokens
// are often not text on their own, so events are counted, not text.)
async function startLongAnswer(info, system, maxTokens) {
  let seen;
  const streaming = new Promise((resolve) => { seen = resolve; });
  const request = streamOnce(info.balancer, { system, question: 'Tell a very long story about this text.' },
    { max_tokens: maxTokens, ignore_eos: true }, (n) => { if (n === 20) seen(); });
  let timer;
  const limit = new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), 120000); });
  const first = await Promise.race([streaming.then(() => 'streaming'), request.then(() => 'ended'), limit]);
  clearTimeout(timer);  // a pending timer would keep the benchmark's process alive after its report
  if (first !== 'streaming') throw new Error(`the long answer did not stream (${first}): ${JSON.stringify(await Promise.race([request, sleep(1)]))}`);
  return { request };
}

export async function runFailover(info, records, work, say) {
  const hosts = docHosts(records);
  const victim = info.hosts.find((h) => h.name === 'h2');
  const survivor = info.hosts.find((h) => h.name === 'h1');
  const deadKeys = work.keys.filter((k) => hosts.get(k) === 'h2');
  if (!victim || !deadKeys.length) return { skipped: 'no document on h2' };
  const systemOf = (k) => work.requests.find((q) => q.key === k).system;
  const before = await hostPromptTokens(survivor);
  const countersBefore = (await balancerStatus(info)).backend;
  say(`failover: h2 holds ${deadKeys.join(', ')}; starting a long answer on ${deadKeys[0]}`);
  // As many tokens as the slot has room for after the document: it streams for seconds.
  const maxTokens = work.ctx - work.systemTokens[work.keys.indexOf(deadKeys[0])] - 512;
  const { request: long } = await startLongAnswer(info, systemOf(deadKeys[0]), maxTokens);
  const killedAt = performance.now();
  process.kill(victim.llama_pid, 'SIGKILL');
  say('failover: h2\'s llama-server killed');
  if (work.gluster) {  // the whole host is lost: its brick of the shared volume too
    execFileSync('bash', [path.join(repoRoot, 'deploy/cluster/gluster.sh'), 'kill', info.dir, 'h2'], { stdio: 'ignore', timeout: 30000 });
    say('failover: h2\'s GlusterFS brick and server killed');
  }
  const down = watchDown(info, 'h2', 30000);
  const inflight = await long;
  const after = [];
  for (const [j, req] of work.after.entries()) {
    const r = await streamOnce(info.balancer, req);
    after.push({ key: req.key, dead: deadKeys.includes(req.key), bound: work.afterBound[j].bound, sentAfter: r.sentAt - killedAt, ok: r.ok,
      host: r.host, status: r.status, error: r.error, processed: r.timings?.prompt_n ?? null, primed: r.primed ?? 0,
      ttft: r.ttft, total: r.total });
  }
  const downAt = await down;
  await sleep(300);
  const survivorTokens = (await hostPromptTokens(survivor)) - before;
  const countersAfter = (await balancerStatus(info)).backend;
  const result = {
    victim: 'h2', deadKeys, downAfter: downAt === null ? null : downAt - killedAt,
    inflight: { status: inflight.status, error: inflight.error, done: inflight.done, events: inflight.events,
      endedAfter: inflight.sentAt + inflight.total - killedAt, host: inflight.host },
    records: after, survivorTokens,
    questionsBound: work.afterBound.reduce((a, p) => a + p.bound, 0),
    deadSystem: deadKeys.reduce((a, k) => a + work.systemTokens[work.keys.indexOf(k)], 0),
    retries: countersAfter.retries - countersBefore.retries,
    redispatches: countersAfter.redispatches - countersBefore.redispatches,
  };
  say(`failover: h2 down after ${result.downAfter === null ? 'never' : `${Math.round(result.downAfter)} ms`}; ` +
    `${after.filter((r) => !r.ok).length} of ${after.length} requests failed after the kill`);
  return result;
}

export function failoverLines(f, fmtInt, fmtMs) {
  if (f.skipped) return [`Failure step skipped: ${f.skipped}.`];
  const lines = [];
  const check = (ok, text) => lines.push(`- ${ok ? 'PASS' : 'FAIL'}: ${text}`);
  const n = f.records.length;
  const dead = f.records.filter((r) => r.dead);
  const failed = f.records.filter((r) => !r.ok);
  const downAfter = f.downAfter ?? Infinity;
  const beforeDown = f.records.filter((r) => r.sentAfter < downAfter);
  const afterDown = f.records.filter((r) => r.sentAfter >= downAfter);
  lines.push(`Then h2's llama-server was killed (SIGKILL) while it streamed a long answer on ${f.deadKeys[0]}; ` +
    `h2 held ${f.deadKeys.join(', ')} (system parts ${fmtInt(f.deadSystem)} tokens together). ` +
    `Then 2 new questions per document, one at a time (${n} requests, ${dead.length} on h2's documents).`, '');
  const sse = f.inflight.status === 200 && f.inflight.error !== null;
  check(sse, `the request in flight on h2 ended ${fmtMs(f.inflight.endedAfter)} after the kill with ` +
    (sse ? `an SSE error event after ${f.inflight.events - 1} events: \`${f.inflight.error}\`` : `status ${f.inflight.status}, ${f.inflight.error ?? 'no error'}`));
  lines.push(`- HAProxy saw h2 down ${f.downAfter === null ? 'never (within 30 s)' : `${fmtMs(f.downAfter)} after the kill`} ` +
    '(`/health` checked every second, down after 2 failures).');
  lines.push(`- sent before that: ${beforeDown.length} request(s), ${beforeDown.filter((r) => r.ok).length} succeeded ` +
    `(HAProxy retried ${f.retries} attempt(s), ${f.redispatches} of them on h1).`);
  check(afterDown.length > 0 && afterDown.every((r) => r.ok && r.host === 'h1'),
    `every request sent after HAProxy saw h2 down succeeded on h1: ${afterDown.filter((r) => r.ok && r.host === 'h1').length} of ${afterDown.length}`);
  lines.push(`- errors after the kill: ${failed.length} of ${n}${failed.length ? ` (${failed.map((r) => `${r.status} ${r.error}`).join('; ')})` : ''}.`);
  const firsts = f.deadKeys.map((k) => dead.find((r) => r.key === k)).filter(Boolean)
    .sort((a, b) => a.sentAfter - b.sentAfter);
  const laters = dead.filter((r) => !firsts.includes(r) && r.ok);
  const ttft = (list) => (list.length ? fmtMs(list.map((r) => r.ttft ?? r.total).sort((a, b) => a - b)[Math.floor((list.length - 1) / 2)]) : 'n/a');
  if (firsts.length) {
    const first = firsts[0];
    lines.push(`- recovery: the first request for an h2 document was sent ${fmtMs(first.sentAfter)} after the kill, ` +
      `${first.ok ? `answered by ${first.host}` : `failed (${first.status} ${first.error})`}, its first token ` +
      `${fmtMs(first.sentAfter + (first.ttft ?? first.total))} after the kill; for the first request on each h2 document ` +
      `the median time to first token was ${ttft(firsts)} (the document computed or restored on h1), for the later ones ${ttft(laters)}.`);
  }
  const recomputed = f.survivorTokens - f.questionsBound;
  const over = (list) => list.reduce((a, r) => a + (r.processed ?? 0) - r.bound, 0);
  lines.push(`- tokens recomputed: h1 processed ${fmtInt(f.survivorTokens)} prompt tokens after the kill, ` +
    `the questions alone need ${fmtInt(f.questionsBound)}: ${fmtInt(recomputed)} recomputed, against ` +
    `${fmtInt(f.deadSystem)} tokens in the system parts of h2's documents. Of these, the requests' own timings ` +
    `count ${fmtInt(over(dead))} on h2's documents and ${fmtInt(over(f.records.filter((r) => !r.dead)))} on h1's own, ` +
    'pushed out of its slots by them (a disk tier primes and restores slots in calls of its own, which only the total counts).');
  return lines;
}
