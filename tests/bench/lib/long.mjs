// The long-document workload: one document that fills the model's context (about 128K tokens;
// `--long-tokens N` for a shorter one), its prefill against restoring its slot file through
// warmslot's disk tier, the same restore asked of llama-server directly (no warmslot), and the
// restore's throughput against what the disk itself reads (`dd` of the same file, with the
// file's pages dropped from the page cache first, and cached).
//
// Steps, one llama-server with 2 slots of 131,072 tokens and a slot directory, warmslot in front:
//   1. the document and a question through warmslot: a new prefix, so warmslot primes the slot
//      with the document and saves it (the prime's prefill time is read from llama-server's log);
//   2. `runs` times each: llama-server restarted on its port and directory, then the document and
//      another question: warmslot restores the file into a slot (the restore's time is
//      llama-server's `timings.restore_ms`, which warmslot records in its index);
//      the request goes once warmslot routes the restarted backend again (its check and slot
//      probe after a restart done);
//      "warm": the file's pages still in the page cache; "cold": dropped before the request
//      (tests/bench/drop_pages.py: fsync, then posix_fadvise DONTNEED; `fincore` checks);
//   3. warmslot stopped, `runs` times each, warm and cold as in 2: llama-server restarted, then
//      `POST /slots/0?action=restore` of the same file straight to it (`timings.restore_ms` and
//      the POST's wall time), then the same chat request straight to it, pinned to that slot:
//      what a restore costs without warmslot, so the table shows warmslot's share apart;
//   4. with every process stopped, `dd` reads the file `runs` times cold, warm and with
//      `iflag=direct` (no page cache at all).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { startLlama, snapshotFiles } from '../../integration/lib/llama.mjs';
import { repoRoot, waitFor } from '../../integration/lib/procs.mjs';
import { startWarmslot } from '../../integration/lib/warmslot.mjs';
import { chat, makeDocument } from '../../integration/lib/text.mjs';
import { promptTokensTotal } from './client.mjs';

// The generated models' context length (tests/models/gen-model.cpp): 131,072 tokens per slot.
// The document leaves room for the chat template, the question and the answer. The models'
// tokenizer has one token per byte, so the document's bytes are about its tokens.
const contextTokens = 131072;
export const defaultLongTokens = 130000;
export const maxLongTokens = 130000;
const runs = 3;

const fmtInt = (n) => Math.round(n).toLocaleString('en-US');
const mb = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;
const rate = (bytes, s) => `${(bytes / s / 1e6).toFixed(0)} MB/s`;
const secs = (s) => (s >= 10 ? `${s.toFixed(1)} s` : s >= 0.1 ? `${s.toFixed(2)} s` : `${(s * 1000).toFixed(1)} ms`);
const signed = (s) => `${s < 0 ? '-' : '+'}${secs(Math.abs(s))}`;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];

function sh(cmd, args) {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 300000 });
}

// Drops the file's pages from the page cache; returns the bytes still resident (fincore).
function dropPages(file) {
  execFileSync('python3', [path.join(repoRoot, 'tests/bench/drop_pages.py'), file], { timeout: 120000 });
  return resident(file);
}

function resident(file) {
  try {
    return Number(sh('fincore', ['--bytes', '--noheadings', '--output', 'RES', file]).trim());
  } catch {
    return NaN;  // no fincore: not checked
  }
}

// `dd` of the whole file to /dev/null: seconds and bytes, from dd's own report.
function ddRun(file, direct) {
  let text;
  try {
    // dd reports on stderr: a shell sends it to stdout.
    text = sh('sh', ['-c', `dd if="$1" of=/dev/null bs=1M${direct ? ' iflag=direct' : ''} 2>&1`, 'dd', file]);
  } catch (e) {
    throw new Error(`dd of ${file} failed: ${e.stderr ?? e.message}`);
  }
  const m = text.match(/(\d+) bytes .* copied, ([\d.]+) s/);
  if (!m) throw new Error(`unexpected dd output: ${text}`);
  return { bytes: Number(m[1]), seconds: Number(m[2]) };
}

// One streamed chat request, like client.mjs's streamChat but on node:http: fetch gives up
// after 300 s without response headers, and a prefill of the whole document (no headers until
// it is done) can take longer on a busy machine. Bounded by `limitMs`.
function streamChat(url, request, limitMs = 3600000, extra = {}) {
  const body = JSON.stringify(chat(request.system, request.question, { stream: true, ...extra }));
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}/v1/chat/completions`, { method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      const out = { route: res.headers['x-warmslot-route'], disk: res.headers['x-warmslot-disk'], timings: undefined,
        content: undefined };
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        buffer += chunk;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const data = buffer.slice(0, end).split('\n').filter((l) => l.startsWith('data:'))
            .map((l) => l.slice(5).trimStart()).join('\n');
          buffer = buffer.slice(end + 2);
          if (!data || data === '[DONE]' || res.statusCode !== 200) continue;
          const ev = JSON.parse(data);
          if (ev.error) { req.destroy(new Error(`streamed error from ${url}: ${data}`)); return; }
          if (out.content === undefined && ev.choices?.[0]?.delta?.content) out.content = performance.now() - t0;
          if (ev.timings) out.timings = ev.timings;
        }
      });
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode} from ${url}: ${buffer.slice(0, 300)}`));
        out.total = performance.now() - t0;
        out.ttft = out.content ?? out.total;
        return out.timings ? resolve(out) : reject(new Error(`no timings in the stream from ${url}`));
      });
      res.on('error', reject);
    });
    req.setTimeout(limitMs, () => req.destroy(new Error(`no answer from ${url} within ${limitMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

// /metrics of a llama-server just restarted on the same port: fetch may first pick a pooled
// keep-alive connection to the stopped process, so a failed read is tried again (bounded).
async function promptTokens(url) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await promptTokensTotal(url);
    } catch (e) {
      if (attempt === 3) throw e;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

async function corrections(ws) {
  const m = (await (await fetch(`${ws.url}/metrics`)).text()).match(/warmslot_belief_corrections_total (\d+)/);
  return Number(m[1]);
}

// The restore time warmslot recorded for the file (llama-server's timings.restore_ms) and the
// restore count, read from its index (read-only).
function indexEntry(dir, file) {
  const out = sh('sqlite3', ['-readonly', '-separator', ' ', path.join(dir, 'warmslot-index.sqlite'),
    `SELECT hits, restore_ms, tokens, bytes FROM snapshots WHERE file = '${file.replace(/'/g, "''")}'`]).trim();
  const [hits, restoreMs, tokens, bytes] = out.split(' ').map(Number);
  return { hits, restoreMs, tokens, bytes };
}

// POST /slots/{slot}?action=restore straight to llama-server: its `timings.restore_ms`, the
// POST's wall time (connection, request, the task's turn on the inference thread, answer) and
// the tokens restored. A fresh connection each time (no keep-alive pool across restarts).
async function directRestore(url, slot, filename) {
  const body = JSON.stringify({ filename });
  const t0 = performance.now();
  const reply = await new Promise((resolve, reject) => {
    const req = http.request(`${url}/slots/${slot}?action=restore`, { method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
      res.on('error', reject);
    });
    req.setTimeout(600000, () => req.destroy(new Error(`no answer to the restore from ${url}`)));
    req.on('error', reject);
    req.end(body);
  });
  const wall = performance.now() - t0;
  if (reply.status !== 200) throw new Error(`restore of ${filename} on ${url}: HTTP ${reply.status} ${reply.text.slice(0, 300)}`);
  const j = JSON.parse(reply.text);
  return { ms: j.timings.restore_ms, wall, tokens: j.n_restored };
}

// The largest "prompt eval time = X ms / N tokens" in a llama-server log: the prime's prefill.
function largestPrefill(logFile) {
  let best = null;
  const text = fs.readFileSync(logFile, 'utf8');
  for (const m of text.matchAll(/prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/g)) {
    const ms = Number(m[1]);
    const tokens = Number(m[2]);
    if (!best || tokens > best.tokens) best = { ms, tokens };
  }
  return best;
}

export async function runLong(opts, model, ctx, say, outDir) {
  const s = { docBytes: opts.longTokens ?? defaultLongTokens };
  const doc = makeDocument(12800, s.docBytes);
  const question = (i) => `Question ${i} on the long document: what does its last paragraph say?`;
  const loads = [];
  const rec = { restores: [] };
  let llama = await startLlama({ arch: opts.arch, model, slots: 2, ctx: contextTokens });
  let ws = null;
  const t0 = performance.now();
  try {
    ws = await startWarmslot({ backends: [{ name: 'b1', url: llama.url, slotSaveDir: llama.saveDir }] });
    await waitFor('warmslot to route', async () => (await (await fetch(`${ws.url}/health`)).json()).backends?.[0]?.routing, 60000);
    loads.push(os.loadavg()[0]);
    say(`long: the document (${fmtInt(s.docBytes)} bytes) and a question through warmslot: prefill and snapshot`);
    let before = await promptTokens(llama.url);
    const first = await streamChat(ws.url, { system: doc, question: question(1) });
    rec.first = { route: first.route, disk: first.disk, ttft: first.ttft, prompt: first.timings.prompt_n + first.timings.cache_n,
      computed: (await promptTokens(llama.url)) - before };
    rec.prefill = largestPrefill(llama.proc.logFile);
    say(`  ${rec.first.route}, ${rec.first.disk}; TTFT ${secs(first.ttft / 1000)}; prefill ${JSON.stringify(rec.prefill)}`);
    const files = snapshotFiles(llama.saveDir);
    if (files.length !== 1) throw new Error(`expected one slot file in ${llama.saveDir}, found ${files.join(', ') || 'none'}`);
    rec.file = path.join(llama.saveDir, files[0]);
    rec.bytes = fs.statSync(rec.file).size;
    for (let i = 0; i < 2 * runs; i++) {
      const mode = i % 2 === 0 ? 'warm' : 'cold';
      const seen = await corrections(ws);
      const old = llama;
      await old.stop();
      llama = await startLlama({ arch: opts.arch, model, slots: 2, ctx: contextTokens, slotSaveDir: old.saveDir, port: old.port });
      await waitFor('warmslot to notice the restart', async () => (await corrections(ws)) > seen, 60000);
      // The same check then probes the restarted backend's slots (two tiny prompts, once per
      // backend start) and routes to it again: a request sent before would wait for that, which
      // is not the restore's time.
      await waitFor('warmslot to route the restarted backend', async () =>
        (await (await fetch(`${ws.url}/health`)).json()).backends?.[0]?.routing === true, 60000);
      const left = mode === 'cold' ? dropPages(rec.file) : resident(rec.file);
      const hitsBefore = indexEntry(llama.saveDir, files[0]).hits;
      before = await promptTokens(llama.url);
      const r = await streamChat(ws.url, { system: doc, question: question(i + 2) });
      const computed = (await promptTokens(llama.url)) - before;
      const e = indexEntry(llama.saveDir, files[0]);
      if (e.hits !== hitsBefore + 1) throw new Error(`request ${i + 2} did not restore the file: ${r.route}, ${r.disk}`);
      rec.restores.push({ mode, residentBefore: left, ms: e.restoreMs, route: r.route, disk: r.disk, ttft: r.ttft, computed });
      say(`  ${mode}: ${r.route}, ${r.disk}; restore ${e.restoreMs.toFixed(1)} ms (${rate(rec.bytes, e.restoreMs / 1000)}), ` +
        `resident before ${Number.isNaN(left) ? '?' : fmtInt(left)} bytes, TTFT ${secs(r.ttft / 1000)}, ${computed} tokens computed`);
    }
    await ws.stop();
    ws = null;
    say('long: the same file restored by llama-server directly (no warmslot), then the request pinned to that slot');
    rec.direct = [];
    for (let i = 0; i < 2 * runs; i++) {
      const mode = i % 2 === 0 ? 'warm' : 'cold';
      const old = llama;
      await old.stop();
      llama = await startLlama({ arch: opts.arch, model, slots: 2, ctx: contextTokens, slotSaveDir: old.saveDir, port: old.port });
      const left = mode === 'cold' ? dropPages(rec.file) : resident(rec.file);
      const d = await directRestore(llama.url, 0, files[0]);
      before = await promptTokens(llama.url);
      const r = await streamChat(llama.url, { system: doc, question: question(2 * runs + i + 2) }, undefined, { id_slot: 0 });
      const computed = (await promptTokens(llama.url)) - before;
      rec.direct.push({ mode, residentBefore: left, ms: d.ms, wall: d.wall, tokens: d.tokens, ttft: r.ttft, computed });
      say(`  ${mode}: restore ${d.ms.toFixed(1)} ms (${rate(rec.bytes, d.ms / 1000)}), POST ${d.wall.toFixed(1)} ms, ` +
        `${fmtInt(d.tokens)} tokens; resident before ${Number.isNaN(left) ? '?' : fmtInt(left)} bytes; then TTFT ` +
        `${secs(r.ttft / 1000)}, ${computed} tokens computed`);
    }
    loads.push(os.loadavg()[0]);
  } finally {
    if (ws) await ws.stop().catch(() => {});
    await llama.stop();
  }
  rec.wall = (performance.now() - t0) / 1000;
  say('long: dd of the slot file, cold, warm and with iflag=direct');
  rec.dd = { cold: [], warm: [], direct: [] };
  for (let i = 0; i < runs; i++) {
    dropPages(rec.file);
    rec.dd.cold.push(ddRun(rec.file, false));
    rec.dd.warm.push(ddRun(rec.file, false));
    rec.dd.direct.push(ddRun(rec.file, true));
  }
  fs.rmSync(rec.file, { force: true });
  if (outDir) fs.writeFileSync(path.join(outDir, `${opts.arch}-${opts.preset}-long.json`), JSON.stringify(rec, null, 1));
  return { text: longReport(rec, opts, ctx), load: [Math.min(...loads), Math.max(...loads)], record: rec };
}

function longReport(rec, opts, ctx) {
  const restoreS = (mode) => rec.restores.filter((r) => r.mode === mode).map((r) => r.ms / 1000);
  const directS = (mode, field) => rec.direct.filter((r) => r.mode === mode).map((r) => r[field] / 1000);
  const ttftS = (list, mode) => list.filter((r) => r.mode === mode).map((r) => r.ttft / 1000);
  // Straight to llama-server, the request comes after the restore's POST: both together are what
  // a client waits for, to compare with the time to first token through warmslot.
  const directTotal = (mode) => rec.direct.filter((r) => r.mode === mode).map((r) => (r.wall + r.ttft) / 1000);
  const ddS = (kind) => rec.dd[kind].map((d) => d.seconds);
  const warm = median(restoreS('warm'));
  const cold = median(restoreS('cold'));
  const ddWarm = median(ddS('warm'));
  const ddCold = median(ddS('cold'));
  const ddDirect = median(ddS('direct'));
  const dWarm = median(directS('warm', 'ms'));
  const dCold = median(directS('cold', 'ms'));
  const dWallWarm = median(directS('warm', 'wall'));
  const dWallCold = median(directS('cold', 'wall'));
  const wsTtft = { warm: median(ttftS(rec.restores, 'warm')), cold: median(ttftS(rec.restores, 'cold')) };
  const dTotal = { warm: median(directTotal('warm')), cold: median(directTotal('cold')) };
  const share = (mode) => wsTtft[mode] - dTotal[mode];
  const b = rec.bytes;
  const list = (xs) => xs.map(secs).join(', ');
  const after = rec.restores.map((r) => r.computed);
  const ttfts = rec.restores.map((r) => r.ttft / 1000);
  const prefillS = rec.prefill.ms / 1000;
  const lines = [
    `### long (${ctx.arch}, ${ctx.preset} preset, load=${ctx.load})`,
    '',
    `One document of ${fmtInt(rec.prefill.tokens)} tokens (the model's context is ${fmtInt(contextTokens)} tokens per slot) ` +
    'in the system message, a question in the user message; one llama-server with `-np 2 -c 262144` and a slot ' +
    `directory on the machine's disk, warmslot in front (default configuration). Medians of ${runs} runs each.`,
    '',
    '| measurement | seconds | throughput | runs |',
    '|---|---:|---:|---|',
    `| prefill of the document (llama-server's \`prompt eval time\` of warmslot's prime, ${fmtInt(rec.prefill.tokens)} tokens) | ` +
      `${secs(prefillS)} | ${fmtInt(rec.prefill.tokens / prefillS)} tokens/s | |`,
    `| slot file: ${mb(b)}, ${fmtInt(b / rec.prefill.tokens)} bytes per token | | | |`,
    `| restore through warmslot, file in the page cache (\`timings.restore_ms\`) | ${secs(warm)} | ${rate(b, warm)} | ${list(restoreS('warm'))} |`,
    `| \`dd bs=1M\` of the file, in the page cache | ${secs(ddWarm)} | ${rate(b, ddWarm)} | ${list(ddS('warm'))} |`,
    `| restore by llama-server directly (no warmslot), file in the page cache (\`timings.restore_ms\`) | ${secs(dWarm)} | ${rate(b, dWarm)} | ${list(directS('warm', 'ms'))} |`,
    `| the same, wall time of its \`POST /slots/0?action=restore\` | ${secs(dWallWarm)} | ${rate(b, dWallWarm)} | ${list(directS('warm', 'wall'))} |`,
    `| restore through warmslot, file's pages dropped first | ${secs(cold)} | ${rate(b, cold)} | ${list(restoreS('cold'))} |`,
    `| restore by llama-server directly (no warmslot), file's pages dropped first (\`timings.restore_ms\`) | ${secs(dCold)} | ${rate(b, dCold)} | ${list(directS('cold', 'ms'))} |`,
    `| the same, wall time of its \`POST /slots/0?action=restore\` | ${secs(dWallCold)} | ${rate(b, dWallCold)} | ${list(directS('cold', 'wall'))} |`,
    `| \`dd bs=1M\` of the file, pages dropped first | ${secs(ddCold)} | ${rate(b, ddCold)} | ${list(ddS('cold'))} |`,
    `| \`dd bs=1M iflag=direct\` of the file | ${secs(ddDirect)} | ${rate(b, ddDirect)} | ${list(ddS('direct'))} |`,
    `| time to first token after a restart, through warmslot (restore and question), file in the page cache | ${secs(wsTtft.warm)} | | ${list(ttftS(rec.restores, 'warm'))} |`,
    `| the same directly: the restore's POST, then the request pinned to the slot (sum of both) | ${secs(dTotal.warm)} | | ${list(directTotal('warm'))} |`,
    `| time to first token after a restart, through warmslot, file's pages dropped first | ${secs(wsTtft.cold)} | | ${list(ttftS(rec.restores, 'cold'))} |`,
    `| the same directly: the restore's POST, then the request pinned to the slot (sum of both) | ${secs(dTotal.cold)} | | ${list(directTotal('cold'))} |`,
    '',
    `llama-server's own restore against \`dd\`: **${(ddWarm / dWarm).toFixed(2)}x** warm, **${(ddCold / dCold).toFixed(2)}x** cold ` +
    `(its \`restore_ms\` directly against through warmslot: ${(dWarm / warm).toFixed(2)}x warm, ${(dCold / cold).toFixed(2)}x cold; ` +
    'warmslot adds nothing inside \`restore_ms\`, so a difference between them is noise). ' +
    'warmslot\'s share of the time to first token (through warmslot minus the restore\'s POST plus the request straight to ' +
    `llama-server): ${signed(share('warm'))} warm, ${signed(share('cold'))} cold. ` +
    `The direct requests computed ${[...new Set(rec.direct.map((r) => r.computed))].join(' or ')} prompt tokens.`,
    '',
    `Restore throughput against the disk's: **${(ddWarm / warm).toFixed(2)}x** of \`dd\` warm, ` +
    `**${(ddCold / cold).toFixed(2)}x** of \`dd\` cold (${(ddDirect / cold).toFixed(2)}x of \`dd iflag=direct\`). ` +
    `Prefill against restore: ${(prefillS / warm).toFixed(0)}x the warm restore, ${(prefillS / cold).toFixed(0)}x the cold one ` +
    '(the reference fork on a 27B hybrid model: 86x warm, 6.5x cold from an HDD). ' +
    `The first request (${rec.first.route}; ${rec.first.disk}) answered after ${secs(rec.first.ttft / 1000)}; ` +
    `after each restart the request restored the file (${[...new Set(rec.restores.map((r) => `${r.route}; ${r.disk}`))].join(' / ')}), ` +
    `computed ${[...new Set(after)].join(' or ')} prompt tokens and answered after ${list(ttfts)} ` +
    `(warm, cold, warm, ...). Bytes of the file still in the page cache after dropping: ` +
    `${[...new Set(rec.restores.filter((r) => r.mode === 'cold').map((r) => (Number.isNaN(r.residentBefore) ? 'not checked' : fmtInt(r.residentBefore))))].join(', ')}.`,
    '',
    'Targets (reported, not enforced): restore at least 0.95x the throughput of `dd` on the same file:',
    '',
    `- ${ddWarm / warm >= 0.95 ? 'PASS' : 'FAIL'}: warm (file in the page cache): ${(ddWarm / warm).toFixed(2)}x ` +
      `(${rate(b, warm)} vs ${rate(b, ddWarm)})`,
    `- ${ddCold / cold >= 0.95 ? 'PASS' : 'FAIL'}: cold (pages dropped first): ${(ddCold / cold).toFixed(2)}x ` +
      `(${rate(b, cold)} vs ${rate(b, ddCold)})`,
    '',
  ];
  void opts;
  return lines.join('\n');
}
