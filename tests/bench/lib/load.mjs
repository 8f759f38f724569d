// A load generator for the benchmarks: N processes that each keep one core busy (a busy loop
// of arithmetic, no I/O, no memory), so that routing choices that depend on timing are measured
// on a machine as loaded as users' machines often are. The processes are started in their own
// process groups through the fixture (tests/integration/lib/procs.mjs), which kills them when
// the benchmark exits, also on SIGINT, SIGTERM or an error.
import path from 'node:path';
import { startProcess, tempDir } from '../../integration/lib/procs.mjs';

const spin = 'let x = 0; for (;;) { x = (x * 1103515245 + 12345) | 0; }';

// Starts `n` busy processes (none for 0). Returns { n, stop() }.
export function startLoad(n) {
  const dir = n > 0 ? tempDir('load') : null;
  const procs = Array.from({ length: n }, (_, i) =>
    startProcess(process.execPath, ['-e', spin], { logFile: path.join(dir, `spin-${i}.log`) }));
  return {
    n,
    async stop() {
      await Promise.all(procs.map((p) => p.stop('SIGKILL', 2000)));
    },
  };
}
