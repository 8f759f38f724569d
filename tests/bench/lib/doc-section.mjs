// Replaces what lies between `<!-- NAME:begin -->` and `<!-- NAME:end -->` in
// docs/benchmarks.md with `text`, leaving the markers and the rest of the file as they are.
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../integration/lib/procs.mjs';

export function replaceDocSection(name, text) {
  const file = path.join(repoRoot, 'docs/benchmarks.md');
  const doc = fs.readFileSync(file, 'utf8');
  const begin = `<!-- ${name}:begin -->`;
  const end = `<!-- ${name}:end -->`;
  const a = doc.indexOf(begin);
  const b = doc.indexOf(end);
  if (a < 0 || b < a) throw new Error(`docs/benchmarks.md has no ${name}:begin / ${name}:end markers`);
  fs.writeFileSync(file, `${doc.slice(0, a + begin.length)}\n${text}\n${doc.slice(b)}`);
}
