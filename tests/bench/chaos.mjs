// Chaos run: warmslot in front of real llama-servers while everything goes wrong at once.
//
//   node tests/bench/chaos.mjs [--requests N] [--concurrency C] [--kills K] [--max-seconds S]
//                              [--write-doc]
//
//   --requests     streamed chat requests in total (default 1000)
//   --concurrency  requests in flight at once (default: all of them)
//   --kills        kill -9 and restarts of one backend llama-server during the load (default 3)
//   --max-seconds  the load stops sending new requests after this long, and a request not
//                  answered within it is given up (default 240)
//   --write-doc    replace the chaos section of docs/benchmarks.md with this run's table
//
// Not a test: it prints a table of what happened (requests, errors by kind, warmslot's peak RSS,
// slot files lost, wrong restores, reservations left after the load, index consistency after a
// kill -9 of warmslot inside a save). One backend's slot directory is a small tmpfs that is
// filled up during the load (mounting it needs root: without, the table says the full disk was
// not run), and reloads switch the cache off and on again.
// Loopback only; every process it starts is stopped. WARMSLOT_BIN (or WARMSLOT_BUILD_DIR) names
// the warmslot binary.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { getJson, postJson, startLlama } from '../integration/lib/llama.mjs';
import { repoRoot, sleep, startProcess, tempDir, waitFor } from '../integration/lib/procs.mjs';
import { startRelay } from '../integration/lib/relay.mjs';
import { readSse, warmslotBin, yamlConfig } from '../integration/lib/warmslot.mjs';

const say = (m) => process.stderr.write(`chaos: ${m}\n`);

function parseArgs(argv) {
  const o = { requests: 1000, concurrency: null, kills: 3, maxSeconds: 240, writeDoc: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const num = () => {
      const v = Number(argv[++i]);
      if (!Number.isFinite(v) || v < 0) throw new Error(`${a} needs a number`);
      return v;
    };
    if (a === '--requests') o.requests = Math.min(num(), 1000);
    else if (a === '--concurrency') o.concurrency = Math.max(1, Math.min(num(), 1000));
    else if (a === '--kills') o.kills = Math.min(num(), 10);
    else if (a === '--max-seconds') o.maxSeconds = Math.min(num(), 900);
    else if (a === '--write-doc') o.writeDoc = true;
    else throw new Error(`unknown argument ${a}`);
  }
  o.concurrency = Math.min(o.concurrency ?? o.requests, Math.max(1, o.requests));
  return o;
}

function binary() {
  if (process.env.WARMSLOT_BIN) return warmslotBin();
  if (process.env.WARMSLOT_BUILD_DIR) return path.join(process.env.WARMSLOT_BUILD_DIR, 'proxy/warmslot');
  return warmslotBin();
}

// ---- warmslot, started and restarted on one config file and one state directory ----

const rewrite = `rewrite:
  default:
    documents:
      order: true
      delimiters:
        - begin: '<document[^>]*>'
          end: '</document>'
`;

function settings(stateDir, interval, cacheOn = true) {
  return `cache:\n  dir: ${stateDir}\n  min_prefix_tokens: 256\n${cacheOn ? '' : '  enabled: false\n'}` +
    `routing:\n  reconcile_interval: ${interval}\n` +
    'timeouts:\n  header_read: 5s\n  body_read: 10s\n' +
    `limits:\n  max_connections: 4096\n${rewrite}`;
}

async function launchWarmslot(bin, configFile, logFile) {
  const proc = startProcess(bin, ['--config', configFile], { logFile });
  const before = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8').length : 0;
  const url = await waitFor('warmslot to listen', () => {
    if (!proc.running) throw new Error(`warmslot exited, see ${logFile}`);
    const m = fs.readFileSync(logFile, 'utf8').slice(before).match(/warmslot listening on (http:\/\/[^\s]+)/);
    return m?.[1];
  }, 30000, 20);
  return { proc, url, pid: proc.child.pid };
}

// ---- load: streamed chats over a few documents ----

const documents = Array.from({ length: 8 }, (_, d) => Array.from({ length: 24 },
  (_, l) => `${d}.${l} the lantern of the orchard ${d * 7 + l} went to the quarry at dawn.`).join('\n'));

// Request i: document i mod 8, one of 5 questions on it.
function chatBody(i) {
  const d = i % documents.length;
  const q = Math.floor(i / documents.length) % 5;
  return {
    messages: [{ role: 'system', content: documents[d] }, { role: 'user', content: `Question ${q} about ${d}?` }],
    max_tokens: 4, temperature: 0, seed: 42, stream: true,
  };
}

async function streamed(url, body, timeoutMs = 120000) {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (res.status !== 200) {
    await res.text().catch(() => '');
    return { kind: `HTTP ${res.status}` };
  }
  let text = '';
  let error = null;
  let timings = null;
  await readSse(res, (data) => {
    if (data === '[DONE]') return;
    const ev = JSON.parse(data);
    if (ev.error) error = ev.error;
    text += ev.choices?.[0]?.delta?.content ?? '';
    if (ev.timings) timings = ev.timings;
  });
  if (error) return { kind: `stream error (${error.type ?? error.code})` };
  return { kind: 'ok', text, timings, disk: res.headers.get('x-warmslot-disk') ?? '' };
}

function transportKind(e) {
  if (e.name === 'TimeoutError') return 'no answer within the client\'s timeout';
  const c = e.cause?.code ?? e.name;
  return `transport ${c ?? e.message.slice(0, 40)}`;
}

// ---- hostile inputs ----

async function deepNesting(url) {
  try {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: '['.repeat(1_000_000),
      signal: AbortSignal.timeout(60000),
    });
    await r.text();
    return `HTTP ${r.status}`;
  } catch (e) { return transportKind(e); }
}

function rawExchange(port, onConnect, capMs) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    let sent = 0;
    const done = (how) => { clearTimeout(t); s.destroy(); resolve({ how, got: got.slice(0, 40), sent }); };
    const t = setTimeout(() => done('still open at the cap'), capMs);
    s.on('connect', () => onConnect(s, (n) => { sent += n; }));
    s.on('data', (d) => { got += d.toString('latin1'); });
    s.on('error', (e) => done(`error ${e.code}`));
    s.on('close', () => done('closed by warmslot'));
  });
}

// A chunk-size line whose extension never ends, written until warmslot answers or closes, or
// until `capMiB` was sent.
async function endlessChunkExtension(port, capMiB) {
  const r = await rawExchange(port, async (s, count) => {
    s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n' +
      'Transfer-Encoding: chunked\r\n\r\n10;ext=');
    const piece = 'a'.repeat(64 * 1024);
    for (let n = 0; n < capMiB * 16 && !s.destroyed; n++) {
      if (!s.write(piece)) await new Promise((ok) => { s.once('drain', ok); s.once('close', ok); });
      count(piece.length);
    }
  }, 60000);
  const status = r.got.match(/^HTTP\/1\.1 (\d+)/)?.[1];
  return `${status ? `HTTP ${status}` : r.how} after ${(r.sent / 1048576).toFixed(1)} MiB`;
}

async function documentTag(url) {
  try {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: `<document ${'a'.repeat(200 * 1024)}` }], max_tokens: 2 }),
      signal: AbortSignal.timeout(120000),
    });
    await r.text();
    return `HTTP ${r.status}`;
  } catch (e) { return `${transportKind(e)} (120 s)`; }
}

// `count` connections that send a header byte every second; how many warmslot closed by itself.
async function slowloris(port, count) {
  const results = await Promise.all(Array.from({ length: count }, () => rawExchange(port, (s) => {
    const head = 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ' + 'a'.repeat(100);
    let i = 0;
    const tick = setInterval(() => {
      if (s.destroyed || i >= head.length) { clearInterval(tick); return; }
      s.write(head[i++]);
    }, 1000);
    s.on('close', () => clearInterval(tick));
  }, 20000)));
  const closed = results.filter((r) => r.how !== 'still open at the cap').length;
  return `${closed} of ${count} closed by warmslot within 20 s`;
}

// ---- the slot directories: index rows against files ----

function indexRows(dir) {
  const db = path.join(dir, 'warmslot-index.sqlite');
  if (!fs.existsSync(db)) return [];
  const out = execFileSync('sqlite3', ['-readonly', db, 'SELECT file, bytes FROM snapshots'], { encoding: 'utf8' });
  return out.split('\n').filter(Boolean).map((l) => { const [file, bytes] = l.split('|'); return { file, bytes: Number(bytes) }; });
}

function slotFiles(dir) {
  return fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => /^ws-.*\.bin$/.test(f)) : [];
}

function consistency(dir) {
  const rows = indexRows(dir);
  const files = new Set(slotFiles(dir));
  const rowFiles = new Set(rows.map((r) => r.file));
  const missing = rows.filter((r) => !files.has(r.file)).length;
  const truncated = rows.filter((r) => files.has(r.file) && fs.statSync(path.join(dir, r.file)).size !== r.bytes).length;
  const orphans = [...files].filter((f) => !rowFiles.has(f)).length;
  return { rows: rows.length, files: files.size, missing, truncated, orphans };
}

function rssKiB(pid) {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
    return m ? Number(m[1]) : 0;
  } catch { return 0; }
}

// ---- a full disk: one backend's slot directory on a small tmpfs, filled up during the load ----

function mountTmpfs(mib) {
  const dir = tempDir('chaos-tmpfs');
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${mib}m`, 'tmpfs', dir], { stdio: 'pipe' });
    return { dir, mib, unmount: () => { try { execFileSync('umount', ['-l', dir]); } catch { /* gone */ } } };
  } catch (e) {
    return { dir, mib: 0, error: String(e.stderr ?? e.message).trim().split('\n')[0], unmount: () => {} };
  }
}

// Writes a filler file into `dir` until the filesystem is full; returns the bytes written.
function fillDisk(dir) {
  const fd = fs.openSync(path.join(dir, 'filler'), 'w');
  let written = 0;
  try {
    for (const size of [1 << 20, 4096, 64]) {
      const chunk = Buffer.alloc(size, 7);
      for (let i = 0; i < 1 << 20; i++) {
        try { written += fs.writeSync(fd, chunk); } catch (e) { if (e.code === 'ENOSPC') break; throw e; }
      }
    }
  } finally {
    fs.closeSync(fd);
  }
  return written;
}

async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(text.match(new RegExp(`^${name} (\\d+)`, 'm'))?.[1] ?? NaN);
}

// ---- the run ----

async function run(opts) {
  const bin = path.join(tempDir('chaos-bin'), 'warmslot');
  fs.copyFileSync(binary(), bin);
  fs.chmodSync(bin, 0o755);
  const stateDir = tempDir('chaos-state');
  const disk = mountTmpfs(16);
  const llamas = [];
  for (let i = 0; i < 2; i++) {
    llamas.push(await startLlama({ arch: 'llama', slots: 2, ctx: 4096, slotSaveDir: i === 1 ? disk.dir : tempDir(`chaos-slots${i}`) }));
  }
  const reference = await startLlama({ arch: 'llama', slots: 1, ctx: 4096 });
  const dir = tempDir('chaos-ws');
  const configFile = path.join(dir, 'warmslot.yaml');
  const logFile = path.join(dir, 'warmslot.log');
  // A relay in front of each backend: it holds the answer of a save on demand, so that the
  // kill -9 of warmslot at the end provably lands inside a save.
  const relays = [];
  for (let i = 0; i < llamas.length; i++) relays.push(await startRelay(() => llamas[i].url));
  const backends = llamas.map((l, i) => ({ name: `b${i}`, url: relays[i].url, slotSaveDir: l.saveDir }));
  const writeConfig = (interval, cacheOn = true) =>
    fs.writeFileSync(configFile, yamlConfig({ backends, extra: settings(stateDir, interval, cacheOn) }));
  writeConfig('200ms');
  let ws = await launchWarmslot(bin, configFile, logFile);
  const counts = new Map();
  const count = (k) => counts.set(k, (counts.get(k) ?? 0) + 1);
  const report = { hostile: {}, reload: '', kills: 0, wrong: 0, compared: 0, restores: 0, lost: 0,
    full: disk.error ? `not run: no tmpfs (${disk.error})` : '', toggles: 0, alive: false, reserved: NaN, inFlight: NaN,
    savesHeld: 0, insideSave: false, after: [], recheck: { compared: 0, wrong: 0, restores: 0, errors: 0 } };
  let rssPeak = 0;
  const sampler = setInterval(() => { rssPeak = Math.max(rssPeak, rssKiB(ws.pid)); }, 200);
  const loads = [os.loadavg()[0]];
  const t0 = Date.now();
  try {
    await waitFor('backends healthy', async () => (await getJson(`${ws.url}/health`)).body.status === 'ok', 60000);
    // The answers llama-server gives straight, temperature 0 and a fixed seed.
    const expected = new Map();
    for (let d = 0; d < documents.length; d++) {
      for (let q = 0; q < 5; q++) {  // one document after the other: its prefix stays cached
        const b = chatBody(q * documents.length + d);
        expected.set(JSON.stringify(b.messages), (await streamed(reference.url, b)).text);
      }
    }
    const deadline = t0 + opts.maxSeconds * 1000;
    let next = 0;
    const worker = async () => {
      while (next < opts.requests && Date.now() < deadline) {
        const i = next++;
        const body = chatBody(i);
        try {
          // All of them may be in flight at once: given up at the run's deadline, not before.
          const r = await streamed(ws.url, body, Math.max(1000, deadline - Date.now()));
          count(r.kind);
          if (r.kind === 'ok') {
            report.compared++;
            if (/restored/.test(r.disk)) report.restores++;
            if (r.text !== expected.get(JSON.stringify(body.messages))) report.wrong++;
          }
        } catch (e) { count(transportKind(e)); }
      }
    };
    const killer = async () => {
      for (let k = 0; k < opts.kills && Date.now() < deadline; k++) {
        await sleep(15000);
        const victim = llamas[1];
        await victim.proc.stop('SIGKILL');
        report.kills++;
        llamas[1] = await startLlama({ arch: 'llama', slots: 2, ctx: 4096, slotSaveDir: victim.saveDir, port: victim.port });
      }
    };
    const hostile = async () => {
      await sleep(5000);
      report.hostile.nesting = await deepNesting(ws.url);
      report.hostile.chunkExtension = await endlessChunkExtension(Number(new URL(ws.url).port), 16);
      report.hostile.documentTag = await documentTag(ws.url);
      report.hostile.slowloris = await slowloris(Number(new URL(ws.url).port), 100);
      writeConfig('300ms');  // a reload while everything else runs
      report.reload = await waitFor('the reload', () => (/config reloaded from/.test(fs.readFileSync(logFile, 'utf8')) ? 'applied' : null), 20000)
        .catch(() => 'not seen in the log');
    };
    // The cache switched off and on again while restores and saves run, every few seconds.
    const reloads = () => (fs.readFileSync(logFile, 'utf8').match(/config reloaded from/g) ?? []).length;
    const toggler = async () => {
      for (let k = 0; k < 6 && Date.now() < deadline; k++) {
        await sleep(4000);
        const seen = reloads();
        writeConfig('300ms', k % 2 === 1);
        if (await waitFor('the reload', () => reloads() > seen, 20000).then(() => true, () => false)) report.toggles++;
      }
      const seen = reloads();
      writeConfig('300ms', true);
      await waitFor('the cache back on', () => reloads() > seen, 20000).catch(() => {});
    };
    // b1's slot directory fills up a few seconds in: its saves fail for want of room, its index
    // cannot write. Freed again before the end, so the kill -9 below finds room to save.
    const filler = async () => {
      if (disk.error) return;
      await sleep(8000);
      const bytes = fillDisk(disk.dir);
      report.full = `b1's slot directory, a ${disk.mib} MiB tmpfs, filled with ${(bytes / 1048576).toFixed(1)} MiB ` +
        `${((Date.now() - t0) / 1000).toFixed(0)} s into the run`;
      await sleep(Math.max(0, Math.min(60000, deadline - Date.now() - 20000)));
      fs.rmSync(path.join(disk.dir, 'filler'), { force: true });
      report.full += `, freed at ${((Date.now() - t0) / 1000).toFixed(0)} s`;
    };
    await Promise.all([...Array.from({ length: opts.concurrency }, worker), killer(), hostile(), toggler(), filler()]);
    loads.push(os.loadavg()[0]);
    fs.rmSync(path.join(disk.dir, 'filler'), { force: true });
    // The load is over: nothing may stay reserved (a leaked reservation keeps its slot from
    // every later plan).
    report.alive = ws.proc.running;
    await waitFor('no reservation left', async () => (await metric(ws.url, 'warmslot_slots_reserved')) === 0 &&
      (await metric(ws.url, 'warmslot_requests_in_flight')) === 0, 30000).catch(() => {});
    report.reserved = await metric(ws.url, 'warmslot_slots_reserved').catch(() => NaN);
    report.inFlight = await metric(ws.url, 'warmslot_requests_in_flight').catch(() => NaN);
    // Slot files on disk, then kill -9 warmslot while saves run.
    const before = llamas.map((l) => consistency(l.saveDir));
    // New prefixes, so that saves are due (on first use) when warmslot dies. The relays let
    // llama-server write each save's file and hold its answer: warmslot is killed while it waits
    // for one, so the kill lands inside a save, with the file written and not yet indexed.
    const burstBodies = [100, 101, 102, 103].map((d) => ({
      messages: [{ role: 'system', content: documents[d % 8].replace(/lantern/g, `lamp ${d}`) }, { role: 'user', content: 'Q?' }],
      max_tokens: 4, temperature: 0, seed: 42, stream: true,
    }));
    for (const b of burstBodies) expected.set(JSON.stringify(b.messages), (await streamed(reference.url, b)).text);
    for (const r of relays) r.holdSaveAnswers = true;
    const burst = burstBodies.map((b) => streamed(ws.url, b).catch(() => null));
    const held = () => relays.reduce((n, r) => n + r.saveAnswersHeld, 0);
    // Should the new prefixes start no save (saves paused on a backend after failed ones), the
    // snapshot endpoint saves what the slots hold.
    const nudge = setTimeout(() => fetch(`${ws.url}/admin/snapshot`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }).catch(() => null), 5000);
    await waitFor('llama-server to have written a save whose answer warmslot waits for', () => held() > 0, 60000, 10)
      .catch(() => {});
    clearTimeout(nudge);
    report.savesHeld = held();
    report.insideSave = report.savesHeld > 0;
    ws.proc.child.kill('SIGKILL');
    await ws.proc.exited;
    for (const r of relays) r.holdSaveAnswers = false;
    await Promise.all(burst);
    report.killed = llamas.map((l) => consistency(l.saveDir));
    // Saves already sent run to their end in llama-server: wait until none is running.
    await waitFor('the backends to be idle', async () => {
      for (const l of llamas) if ((await getJson(`${l.url}/slots`)).body.some((x) => x.is_processing)) return false;
      return true;
    }, 30000).catch(() => {});
    ws = await launchWarmslot(bin, configFile, logFile);
    await waitFor('backends healthy after the restart', async () => (await getJson(`${ws.url}/health`)).body.status === 'ok', 60000);
    // The disk tier opens its indexes at start and deletes files without a row: at most 15 s.
    const clean = (c) => c.missing + c.truncated + c.orphans === 0;
    await waitFor('the indexes to match the files', () => llamas.every((l) => clean(consistency(l.saveDir))), 15000)
      .catch(() => {});
    const after = llamas.map((l) => consistency(l.saveDir));
    // Every prefix again after the restart (the burst's and the load's): a restore of a file
    // that holds something else would show as an answer that differs from llama-server alone.
    const recheck = [...burstBodies, ...Array.from({ length: 5 * documents.length }, (_, i) => chatBody(i))];
    for (const b of recheck) {
      const r = await streamed(ws.url, b).catch((e) => ({ kind: transportKind(e) }));
      if (r.kind !== 'ok') { report.recheck.errors++; continue; }
      report.recheck.compared++;
      if (/restored/.test(r.disk)) report.recheck.restores++;
      if (r.text !== expected.get(JSON.stringify(b.messages))) report.recheck.wrong++;
    }
    // Files the index had before the kill that are gone or truncated now (none were evicted:
    // the budget is far above what the run writes).
    report.lost = after.reduce((a, c) => a + c.missing + c.truncated, 0);
    report.before = before;
    report.after = after;
  } finally {
    clearInterval(sampler);
    await ws.proc.stop('SIGTERM', 15000);
    for (const l of [...llamas, reference]) await l.proc.stop('SIGKILL');
    for (const r of relays) await r.stop();
    disk.unmount();
  }
  report.counts = counts;
  report.rssPeakMiB = rssPeak / 1024;
  report.seconds = (Date.now() - t0) / 1000;
  report.loads = loads;
  return report;
}

function table(opts, r, ctx) {
  const total = [...r.counts.values()].reduce((a, b) => a + b, 0);
  const errors = [...r.counts.entries()].filter(([k]) => k !== 'ok').map(([k, v]) => `${k}: ${v}`).join(', ') || 'none';
  const idx = (list) => list.map((c, i) => `b${i}: ${c.rows} rows, ${c.files} files, ${c.missing} rows without a file, ${c.truncated} truncated, ${c.orphans} files without a row`).join('; ');
  const rows = [
    ['streamed requests', `${total} (${opts.concurrency === opts.requests ? 'all in flight at once' : `${opts.concurrency} at a time`}; the whole run ${r.seconds.toFixed(0)} s)`],
    ['answered 200 and complete', String(r.counts.get('ok') ?? 0)],
    ['errors by kind', errors],
    ['backend kill -9 and restart', String(r.kills)],
    ['warmslot RSS peak', `${r.rssPeakMiB.toFixed(0)} MiB`],
    ['1,000,000 `[` body', r.hostile.nesting ?? 'not run'],
    ['endless chunk extension (16 MiB cap)', r.hostile.chunkExtension ?? 'not run'],
    ['`<document ` + 200 KB without `>`', r.hostile.documentTag ?? 'not run'],
    ['slowloris headers (100 connections)', r.hostile.slowloris ?? 'not run'],
    ['config reload during the load', r.reload || 'not run'],
    ['reloads switching the cache off and on', String(r.toggles)],
    ['full disk', r.full || 'not reached'],
    ['warmslot alive after the load', r.alive ? 'yes' : 'NO'],
    ['slots reserved / requests in flight once the load ended (`/metrics` gauges)', `${r.reserved} / ${r.inFlight}`],
    ['answers compared with llama-server alone', `${r.compared} (${r.restores} after a disk restore)`],
    ['wrong answers (possible wrong restores)', String(r.wrong)],
    ['kill -9 of warmslot inside a save', r.insideSave
      ? `yes: llama-server had written ${r.savesHeld} slot file(s) whose save answer warmslot had not read`
      : 'NO: no save was under way when warmslot was killed'],
    ['slot files lost (kill -9 inside a save)', String(r.lost)],
    ['index before the new documents', idx(r.before ?? [])],
    ['index right after the kill', idx(r.killed ?? [])],
    ['index after the restart', idx(r.after ?? [])],
    ['index rows equal the finished files after the restart', (r.after ?? []).length && r.after.every((c) => c.rows === c.files && c.missing + c.truncated + c.orphans === 0) ? 'yes' : 'NO'],
    ['every prefix again after the restart, compared with llama-server alone', `${r.recheck.compared} answered (${r.recheck.restores} after a disk restore), ${r.recheck.wrong} wrong, ${r.recheck.errors} errors`],
  ];
  return `Measured ${ctx.date} on ${ctx.cores} cores, checkout at ${ctx.commit}, ` +
    `1-minute load average ${Math.min(...r.loads).toFixed(1)} to ${Math.max(...r.loads).toFixed(1)}; ` +
    `\`${ctx.command}\`.\n\n| what | result |\n|---|---|\n${rows.map(([a, b]) => `| ${a} | ${b} |`).join('\n')}\n`;
}

const intro = `## Chaos

What warmslot does when everything goes wrong at once, on real llama-server processes (the tiny
generated \`llama\` model, two backends with slot directories, so the disk tier is on). Reproduce with

\`\`\`
node tests/bench/chaos.mjs [--requests 1000] [--concurrency 1000] [--kills 3] [--max-seconds 240] [--write-doc]
\`\`\`

It runs at the same time: streamed chat requests over eight documents, all of them in flight at
once (warmslot's \`limits.max_connections\` is set to 4096 for the run; llama-server queues what
its slots cannot run yet, on HTTP threads it adds as connections come); a loop that
kills one backend llama-server with \`kill -9\` and starts it again on the same port and slot
directory; hostile inputs (a body of a million \`[\`, a chunk-size line whose extension never
ends, sent up to a cap, a \`<document \` tag left open over 200 KB with the \`documents.delimiters\`
rule on, and 100 slowloris connections that send a header byte a second); and a config reload
(the watched YAML file is rewritten), then six more that switch the cache off and on again while
restores and saves run; and a full disk: the second backend's slot directory is a 16 MiB tmpfs
(mounting it needs root; without, the table says so) that a filler file fills up 8 s into the
run and that is freed 20 s before its end. Once the load is over, the \`/metrics\` gauges
\`warmslot_slots_reserved\` and \`warmslot_requests_in_flight\` must be 0: a reservation that an
error or a cancellation did not end would keep its slot from every later plan. Each backend sits behind a loopback relay that forwards
everything. Then it sends four requests with new documents, whose slot files are due on first
use, with the relays holding back the answers of slot saves: llama-server writes the file, warmslot
never hears back. As soon as one such answer is held, warmslot is killed with \`kill -9\`, so the
kill lands inside a save every run (the table says so, or says NO). It starts warmslot again on the
same state and slot directories, compares each slot directory's SQLite index with the files in it,
right after the kill and after the restart, and sends every prefix of the run once more, comparing
the answers with llama-server alone.

A hostile input whose row shows warmslot reading it to the cap, or an error count that is not
explained by the backend kills, is a finding: the table reports what this build does, not what it
should do.

- **Errors by kind**: HTTP statuses other than 200, errors streamed after the headers, and
  transport errors (connection reset or refused) seen by the client. Requests in flight on a
  backend killed with \`kill -9\` end with an error: that is expected; the table says how many.
- **RSS peak**: warmslot's \`VmRSS\` from \`/proc/<pid>/status\`, sampled every 200 ms.
- **Wrong restores**: every request is also answered once by a separate llama-server alone, with
  \`temperature: 0\` and a fixed seed; an answer through warmslot that differs means the slot it ran
  on held something other than the request's prefix (a wrong restore or a wrong reuse). Random
  weights make near-ties between tokens likely, and llama.cpp's sums can differ in the last bit
  with the batch a token was computed in, so a difference is a lead to follow, not proof.
- **Slot files lost**: files the index listed before the kill that are gone or shorter than the
  index says after the restart (the disk budget is far above what the run writes, so none was
  evicted). **Index right after the kill**: the file of the interrupted save shows as a file
  without a row. **Index after the restart**: rows without a file and files without a row (warmslot
  deletes files without a row when it opens an index); the rows must equal the finished files.
`;

function writeDoc(text) {
  const file = path.join(repoRoot, 'docs/benchmarks.md');
  const begin = '<!-- chaos:begin -->';
  const end = '<!-- chaos:end -->';
  let doc = fs.readFileSync(file, 'utf8');
  const section = `${begin}\n${intro}\n${text}${end}`;
  const a = doc.indexOf(begin);
  const b = doc.indexOf(end);
  doc = a >= 0 && b > a ? doc.slice(0, a) + section + doc.slice(b + end.length) : `${doc.trimEnd()}\n\n${section}\n`;
  fs.writeFileSync(file, doc);
  say(`updated ${file}`);
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  let commit = 'unknown';
  try {
    commit = execFileSync('git', ['-C', repoRoot, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  } catch { /* not a checkout */ }
  const ctx = {
    date: new Date().toISOString().slice(0, 10), commit, cores: os.availableParallelism?.() ?? os.cpus().length,
    command: `node tests/bench/chaos.mjs${process.argv.slice(2).map((a) => ` ${a}`).join('')}`,
  };
  const r = await run(opts);
  const text = table(opts, r, ctx);
  process.stdout.write(`${text}\n`);
  if (opts.writeDoc) writeDoc(text.replace(/ --write-doc/, ''));
  process.exit(0);
}

main().catch((e) => { process.stderr.write(`${e.stack}\n`); process.exit(1); });
