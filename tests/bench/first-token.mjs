// The time to the first token of a new document: straight to llama-server against through
// warmslot (default config), on a real llama-server slowed by a SIGSTOP/SIGCONT duty cycle so
// that a document's prefill takes as long, relative to everything else, as on a slow device.
// Each round sends one new document straight and another through warmslot (the order alternates
// between rounds, the slots are erased before each), streamed over Chat Completions; the first
// token is the first content delta. Prints a table per model and the median ratio, and whether
// warmslot's file of the document was on disk within a minute of the answer.
//
//   node tests/bench/first-token.mjs [--arch llama|qwen35]... [--bytes N] [--rounds N]
//                                    [--duty MS] [--preset tiny|bench] [--write-doc]
//
//   --bytes N    each document's size (default 12000, about 12K tokens)
//   --rounds N   documents per side and model (default 3)
//   --duty MS    llama-server runs MS milliseconds of every 500 (default 40; 500: no cycle)
//   --preset P   the generated models' size: tiny (default) or bench (about 32 KB of KV per
//                token, a prefill some 30 times slower: no duty cycle needed to be slow, and
//                warmslot's small calls to llama-server are not slowed with the prefill)
//   --write-doc  replace the text between <!-- first-token:begin --> and
//                <!-- first-token:end --> (first-token-bench with --preset bench) in
//                docs/benchmarks.md
//
// Every process is started on 127.0.0.1 and stopped at the end, also on error.
import http from 'node:http';
import os from 'node:os';
import { execSync } from 'node:child_process';
import { getJson, modelPath, postJson, snapshotFiles, startLlama } from '../integration/lib/llama.mjs';
import { dutyCycle, repoRoot, sleep, waitFor } from '../integration/lib/procs.mjs';
import { startWarmslot } from '../integration/lib/warmslot.mjs';
import { makeDocument } from '../integration/lib/text.mjs';
import { replaceDocSection } from './lib/doc-section.mjs';

function parseArgs(argv) {
  const o = { archs: [], bytes: 12000, rounds: 3, duty: 40, preset: 'tiny', writeDoc: false };
  for (let i = 0; i < argv.length; i++) {
    const [name, inline] = argv[i].split('=');
    const value = () => inline ?? argv[++i];
    if (name === '--arch') o.archs.push(value());
    else if (name === '--bytes') o.bytes = Number(value());
    else if (name === '--rounds') o.rounds = Number(value());
    else if (name === '--duty') o.duty = Number(value());
    else if (name === '--preset') o.preset = value();
    else if (name === '--write-doc') o.writeDoc = true;
    else { console.error(`first-token.mjs: unknown argument ${argv[i]}`); process.exit(2); }
  }
  if (!o.archs.length) o.archs = ['llama', 'qwen35'];
  const bad = o.archs.find((a) => a !== 'llama' && a !== 'qwen35');
  if (bad || !(o.bytes >= 2000 && o.bytes <= 64000) || !(o.rounds >= 1 && o.rounds <= 10) ||
      !(o.duty >= 10 && o.duty <= 500) || !['tiny', 'bench'].includes(o.preset)) {
    console.error('first-token.mjs: --arch llama|qwen35, --bytes 2000..64000, --rounds 1..10, --duty 10..500, --preset tiny|bench');
    process.exit(2);
  }
  return o;
}

const periodMs = 500;

// One streamed chat request on a connection of its own: milliseconds to the head, to the first
// content delta and to the end, and warmslot's headers or trailers.
function timedChat(base, doc) {
  const body = JSON.stringify({
    messages: [{ role: 'system', content: doc }, { role: 'user', content: 'What does the last line say?' }],
    max_tokens: 8, temperature: 0, seed: 42, stream: true,
  });
  return new Promise((resolve, reject) => {
    const u = new URL('/v1/chat/completions', base);
    const start = performance.now();
    let first = 0;
    let raw = '';
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', agent: false,
      headers: { 'content-type': 'application/json' } }, (res) => {
      const head = performance.now() - start;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        raw += d;
        if (!first && /"delta":\{[^}]*"content":"[^"]/.test(raw)) first = performance.now() - start;
      });
      res.on('end', () => {
        const h = { ...res.headers, ...res.trailers };
        if (res.statusCode !== 200 || !first) reject(new Error(`${base}: status ${res.statusCode}, no first token: ${raw.slice(0, 300)}`));
        else resolve({ head, first, end: performance.now() - start, disk: h['x-warmslot-disk'] ?? '-',
          primed: Number(h['x-warmslot-primed-tokens'] ?? 0), route: h['x-warmslot-route'] ?? '-' });
      });
      res.on('error', reject);
    });
    req.setTimeout(1800000, () => req.destroy(new Error('no byte for 30 minutes')));
    req.on('error', reject);
    req.end(body);
  });
}

async function eraseAll(url, slots) {
  for (let s = 0; s < slots; s++) await postJson(`${url}/slots/${s}?action=erase`, {});
}

async function runArch(arch, o, log) {
  const llama = await startLlama({ arch, model: modelPath(arch, o.preset), slots: 2, ctx: 2 * (o.bytes + 4096) });
  let ws;
  const rows = [];
  try {
    ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
      extra: 'routing:\n  reconcile_interval: 100ms\n' });
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 60000);
    for (let r = 0; r < o.rounds; r++) {
      const row = {};
      const sides = r % 2 === 0 ? ['straight', 'warmslot'] : ['warmslot', 'straight'];
      for (const side of sides) {
        await eraseAll(llama.url, llama.slots);
        // warmslot sees the erased slots before it plans (its reconcile runs every 100 ms).
        await sleep(500);
        const doc = makeDocument(9100 + 10 * r + (side === 'straight' ? 0 : 1), o.bytes);
        const stop = dutyCycle(llama.proc.child.pid, o.duty, periodMs);
        const filesBefore = snapshotFiles(llama.saveDir).length;
        try {
          row[side] = await timedChat(side === 'straight' ? llama.url : ws.url, doc);
        } finally {
          await stop();
        }
        if (side === 'warmslot') {
          // A file saved after the answer: on the slot directory within a minute.
          const deadline = Date.now() + 60000;
          while (snapshotFiles(llama.saveDir).length <= filesBefore && Date.now() < deadline) await sleep(100);
          row.warmslot.fileAfter = snapshotFiles(llama.saveDir).length > filesBefore;
        }
        log(`${arch} round ${r + 1} ${side}: first token after ${(row[side].first / 1000).toFixed(1)} s` +
          (side === 'warmslot' ? ` (route ${row[side].route}, primed ${row[side].primed}, disk ${row[side].disk})` : ''));
      }
      rows.push(row);
    }
  } finally {
    if (ws) await ws.stop();
    await llama.stop();
  }
  return rows;
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

function table(arch, o, rows) {
  const lines = [`### ${arch} ${o.preset} model, ${o.bytes}-byte documents`, '',
    '| round | straight: first token | warmslot: first token | ratio | warmslot: primed tokens | warmslot: disk | file on disk after |',
    '|---|---:|---:|---:|---:|---|---|'];
  rows.forEach((row, i) => {
    lines.push(`| ${i + 1} | ${(row.straight.first / 1000).toFixed(1)} s | ${(row.warmslot.first / 1000).toFixed(1)} s | ` +
      `${(row.warmslot.first / row.straight.first).toFixed(3)} | ${row.warmslot.primed} | ${row.warmslot.disk} | ` +
      `${row.warmslot.fileAfter ? 'yes' : 'no'} |`);
  });
  const ratio = median(rows.map((row) => row.warmslot.first / row.straight.first));
  lines.push('', `Median ratio ${ratio.toFixed(3)}; target at most 1.05: ${ratio <= 1.05 ? 'PASS' : 'FAIL'}.`);
  return lines.join('\n');
}

const o = parseArgs(process.argv.slice(2));
const out = [];
for (const arch of o.archs) {
  const rows = await runArch(arch, o, (l) => console.error(l));
  out.push(table(arch, o, rows));
}
let commit = '';
try { commit = execSync('git rev-parse --short HEAD', { cwd: repoRoot }).toString().trim(); } catch { /* not a checkout */ }
const header = `Measured ${new Date().toISOString().slice(0, 10)} on ${os.cpus().length} cores, checkout at ${commit || '?'}, ` +
  `${o.preset} models, ${o.duty >= periodMs ? 'llama-server running freely' : `llama-server running ${o.duty} ms of every ${periodMs} ms`}, 1-minute load average ` +
  `${os.loadavg()[0].toFixed(1)} at the end. Command: \`node tests/bench/first-token.mjs` +
  `${o.archs.length === 2 ? '' : o.archs.map((a) => ` --arch ${a}`).join('')} --bytes ${o.bytes} --rounds ${o.rounds} --duty ${o.duty}${o.preset === 'tiny' ? '' : ` --preset ${o.preset}`}\`.`;
const text = [header, '', ...out.flatMap((t) => [t, ''])].join('\n').trimEnd();
console.log(text);
if (o.writeDoc) replaceDocSection(o.preset === 'tiny' ? 'first-token' : 'first-token-bench', text);
