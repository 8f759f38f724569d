// Measures llama-server's cache behaviours on the generated models and writes the table to
// docs/llama-server-behaviour.md (or prints it with --print).
//   node tests/tools/behaviour-doc.mjs [--print]
import fs from 'node:fs';
import path from 'node:path';
import { measure } from '../integration/lib/ground-truth.mjs';
import { llamaPins, llamaServerBin } from '../integration/lib/llama.mjs';
import { repoRoot } from '../integration/lib/procs.mjs';
import { spawnSync } from 'node:child_process';

const archs = { llama: 'plain attention (`llama`)', qwen35: 'hybrid Gated DeltaNet + attention (`qwen35`)' };
// One column per model and pinned llama.cpp version (tests/llama/pins).
const columns = [];
for (const arch of Object.keys(archs)) {
  for (const pin of llamaPins) {
    const v = spawnSync(llamaServerBin(pin), ['--version'], { encoding: 'utf8' });
    const commit = `${v.stdout}${v.stderr}`.match(/commit ([0-9a-f]+)/)?.[1] ?? 'commit unknown';
    columns.push({ arch, pin, commit, rows: await measure(arch, { pin, log: (m) => console.error(`${pin}: ${m}`) }) });
  }
}
const steps = columns[0].rows.map((r) => r.step);
const cell = (r) => `${r.processed} of ${r.total} (${r.limit}) ${r.ok ? 'ok' : '**CHANGED**'}`;
const versions = [...new Map(columns.map((c) => [c.pin, c.commit])).entries()]
  .map(([pin, commit]) => `\`${pin}\` (commit ${commit})`).join(' and ');
const lines = [
  '# llama-server behaviour, measured',
  '',
  'Written by `node tests/tools/behaviour-doc.mjs`; the same measurements are asserted by',
  '`tests/integration/ground-truth.test.mjs` in every test run. Do not edit by hand.',
  '',
  `Servers: llama.cpp from ${versions} (the pins in \`tests/llama/pins\`), 2 slots, 32,768 tokens per slot,`,
  '`--cache-ram 0`, tiny generated random-weight models (byte-level vocabulary, ChatML template).',
  'Document: about 7,000 tokens in the system message; questions in the user message.',
  'Cells: prompt tokens processed (`timings.prompt_n`) of the prompt\'s tokens, the bound the test',
  'holds it to, and whether it held.',
  '',
  `| step | ${columns.map((c) => `${archs[c.arch]}, ${c.pin.replace('node-llama-cpp@', '')}`).join(' | ')} |`,
  `|---|${columns.map(() => '---').join('|')}|`,
  ...steps.map((s, i) => `| ${s} | ${columns.map((c) => cell(c.rows[i])).join(' | ')} |`),
  '',
  'Last row: the file saved by a 2-slot server is restored into a 3-slot server; the bound is',
  'HTTP 400 and a slot left empty (the next request reuses nothing).',
  '',
];
// Where the versions computed different amounts for the same model and step.
const differences = [];
for (const arch of Object.keys(archs)) {
  const mine = columns.filter((c) => c.arch === arch);
  steps.forEach((s, i) => {
    const counts = mine.map((c) => c.rows[i].processed);
    if (new Set(counts).size > 1) {
      differences.push(`- ${archs[arch]}, ${s}: ${mine.map((c, j) => `${counts[j]} on ${c.pin.replace('node-llama-cpp@', '')}`).join(', ')}.`);
    }
  });
}
lines.push('Where the versions differ:', '', ...(differences.length ? differences : ['- nowhere.']), '');
const text = lines.join('\n');
if (process.argv.includes('--print')) process.stdout.write(text);
else {
  fs.writeFileSync(path.join(repoRoot, 'docs/llama-server-behaviour.md'), text);
  console.error('wrote docs/llama-server-behaviour.md');
}
