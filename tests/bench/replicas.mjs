// Replicas on one host: two llama-server processes of one model (-np 1 each, a slot directory
// each) behind one warmslot. A document is read on replica a; while a is busy with a long answer,
// the next question on the document goes to replica b. Measured: what b computed and the time to
// its answer, with cache.replica_files on (a's file is linked into b's directory and restored)
// and off (b computes the document), on the plain and the hybrid test model. Prints a table
// (docs/scaling.md).
//
//   node tests/bench/replicas.mjs [--doc-bytes N]
//
// WARMSLOT_BIN selects the warmslot binary (default build/proxy/warmslot).
import { performance } from 'node:perf_hooks';
import { getJson, postJson, questionTokens, startLlama } from '../integration/lib/llama.mjs';
import { waitFor } from '../integration/lib/procs.mjs';
import { startWarmslot } from '../integration/lib/warmslot.mjs';
import { diskSettings } from '../integration/lib/ask.mjs';
import { chat, makeDocument } from '../integration/lib/text.mjs';

const docBytes = Number(process.argv[process.argv.indexOf('--doc-bytes') + 1]) || 8000;
const say = (m) => process.stderr.write(`replicas: ${m}\n`);

async function promptTokensTotal(llama) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)[1]);
}

async function measure(arch, replicaFiles) {
  const ctx = docBytes * 2 + 4096;
  const a = await startLlama({ arch, slots: 1, ctx });
  const b = await startLlama({ arch, slots: 1, ctx });
  const ws = await startWarmslot({ backends: [{ name: 'a', url: a.url, slotSaveDir: a.saveDir },
    { name: 'b', url: b.url, slotSaveDir: b.saveDir }], extra: `${diskSettings}  replica_files: ${replicaFiles}\n` });
  const ctl = new AbortController();
  try {
    await waitFor('both backends routed', async () =>
      (await getJson(`${ws.url}/health`)).body.backends?.filter((x) => x.routing).length === 2, 30000);
    const doc = makeDocument(7100, docBytes);
    const first = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'What is on the first line?'));
    if (first.headers.get('x-warmslot-backend') !== 'a') throw new Error('the document did not start on a');
    const busy = fetch(`${ws.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat(doc, 'Tell a very long story.', { max_tokens: 100000, ignore_eos: true })), signal: ctl.signal })
      .then((r) => r.text()).catch(() => null);
    await waitFor('a busy', async () => (await getJson(`${a.url}/slots`)).body[0].is_processing, 30000);
    const q = 'And what is on the last line?';
    const before = await promptTokensTotal(b);
    const t0 = performance.now();
    const r = await postJson(`${ws.url}/v1/chat/completions`, chat(doc, q));
    const ms = performance.now() - t0;
    const computed = (await promptTokensTotal(b)) - before;
    ctl.abort();
    await busy;
    return { arch, replicaFiles, backend: r.headers.get('x-warmslot-backend'), disk: r.headers.get('x-warmslot-disk'),
      computed, question: await questionTokens(b.url, q), ms, docTokens: first.body.timings.prompt_n };
  } finally {
    ctl.abort();
    await ws.stop();
    await a.stop();
    await b.stop();
  }
}

const rows = [];
for (const arch of ['llama', 'qwen35']) {
  for (const on of [true, false]) {
    say(`${arch}, replica_files ${on}`);
    rows.push(await measure(arch, on));
  }
}
const lines = [
  `A document of about ${docBytes.toLocaleString('en-US')} bytes read on replica a; a busy with a long answer; the next question goes to replica b (llama-server -np 1 each, a slot directory each, one warmslot).`,
  '',
  '| model | `cache.replica_files` | answered by | X-Warmslot-Disk | b computed (prompt tokens) | the question alone | time to the answer |',
  '|---|---|---|---|---:|---:|---:|',
];
for (const r of rows) {
  lines.push(`| ${r.arch} | ${r.replicaFiles} | ${r.backend} | ${r.disk ?? ''} | ${r.computed.toLocaleString('en-US')} | ` +
    `${r.question} | ${r.ms >= 1000 ? `${(r.ms / 1000).toFixed(2)} s` : `${Math.round(r.ms)} ms`} |`);
}
process.stdout.write(`${lines.join('\n')}\n`);
