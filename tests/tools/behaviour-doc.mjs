// Measures llama-server's cache behaviours on the generated models and writes the table to
// docs/llama-server-behaviour.md (or prints it with --print).
//   node tests/tools/behaviour-doc.mjs [--print]
import fs from 'node:fs';
import path from 'node:path';
import { measure } from '../integration/lib/ground-truth.mjs';
import { llamaServerBin } from '../integration/lib/llama.mjs';
import { repoRoot } from '../integration/lib/procs.mjs';
import { spawnSync } from 'node:child_process';

const archs = { llama: 'plain attention (`llama`)', qwen35: 'hybrid Gated DeltaNet + attention (`qwen35`)' };
const results = {};
for (const arch of Object.keys(archs)) results[arch] = await measure(arch, { log: (m) => console.error(m) });

const v = spawnSync(llamaServerBin(), ['--version'], { encoding: 'utf8' });
const version = `${v.stdout}${v.stderr}`.split('\n').find((l) => l.startsWith('version')) ?? 'version unknown';
const steps = results.llama.map((r) => r.step);
const cell = (r) => `${r.processed} of ${r.total} (${r.limit}) ${r.ok ? 'ok' : '**CHANGED**'}`;
const lines = [
  '# llama-server behaviour, measured',
  '',
  'Written by `node tests/tools/behaviour-doc.mjs`; the same measurements are asserted by',
  '`tests/integration/ground-truth.test.mjs` in every test run. Do not edit by hand.',
  '',
  `Server: llama.cpp from \`node-llama-cpp@3.21.1\` (${version.trim()}), 2 slots, 32,768 tokens per slot,`,
  '`--cache-ram 0`, tiny generated random-weight models (byte-level vocabulary, ChatML template).',
  'Document: about 7,000 tokens in the system message; questions in the user message.',
  'Cells: prompt tokens processed (`timings.prompt_n`) of the prompt\'s tokens, the bound the test',
  'holds it to, and whether it held.',
  '',
  `| step | ${Object.values(archs).join(' | ')} |`,
  `|---|${Object.keys(archs).map(() => '---').join('|')}|`,
  ...steps.map((s, i) => `| ${s} | ${Object.keys(archs).map((a) => cell(results[a][i])).join(' | ')} |`),
  '',
  'Last row: the file saved by a 2-slot server is restored into a 3-slot server; the bound is',
  'HTTP 400 and a slot left empty (the next request reuses nothing).',
  '',
];
const text = lines.join('\n');
if (process.argv.includes('--print')) process.stdout.write(text);
else {
  fs.writeFileSync(path.join(repoRoot, 'docs/llama-server-behaviour.md'), text);
  console.error('wrote docs/llama-server-behaviour.md');
}
