// Processes started by tests: spawned in their own process group, always stopped.
import { spawn, execFileSync } from 'node:child_process';
import net from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const live = new Set();
function killAll() {
  for (const p of live) {
    try { process.kill(-p.pid, 'SIGKILL'); } catch { /* already gone */ }
  }
  live.clear();
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { killAll(); process.exit(130); });
// A process that a failed test's cleanup never reached (its `finally` threw before stopping it)
// would keep this file's process waiting forever. Registered first, this hook runs before the
// file's own `after` hooks, which may still stop processes gracefully: the leftovers are killed
// a minute later, on a timer that does not itself keep the file's process alive.
if (process.env.NODE_TEST_CONTEXT || process.argv.includes('--test')) {
  const { after } = await import('node:test');
  after(() => {
    setTimeout(() => {
      if (live.size) console.error(`stopping ${live.size} process(es) left running by a failed test`);
      killAll();
    }, 60000).unref();
  });
}

export const repoRoot = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../..');

// A free loopback port (bound and released; callers retry on the rare collision).
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export function tempDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), `warmslot-${prefix}-`));
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls `check` until it returns a truthy value or the deadline passes.
export async function waitFor(what, check, timeoutMs = 60000, everyMs = 50) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) { last = e; }
    await sleep(everyMs);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

// Slows process `pid` to a fraction of its speed: stopped (SIGSTOP) for all but `run` ms of
// every `period` ms until the returned function is called, which ends with it running. A `run`
// of the whole period leaves it alone.
export function dutyCycle(pid, run, period = 500) {
  if (run >= period) return async () => {};
  let on = true;
  const done = (async () => {
    while (on) {
      try { process.kill(pid, 'SIGSTOP'); } catch { return; }
      await sleep(period - run);
      try { process.kill(pid, 'SIGCONT'); } catch { return; }
      await sleep(run);
    }
  })();
  return async () => {
    on = false;
    await done;
    try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ }
  };
}

// Starts a process whose output goes to a log file. Returns a handle with stop() and exited.
export function startProcess(cmd, args, { logFile, env } = {}) {
  const out = fs.openSync(logFile, 'a');
  const child = spawn(cmd, args, {
    detached: true, stdio: ['ignore', out, out], env: { ...process.env, ...env },
  });
  fs.closeSync(out);
  live.add(child);
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => {
    live.delete(child);
    resolve({ code, signal });
  }));
  return {
    child, exited, logFile,
    get running() { return child.exitCode === null && child.signalCode === null; },
    async stop(signal = 'SIGTERM', graceMs = 5000) {
      if (!this.running) return exited;
      try { process.kill(-child.pid, signal); } catch { /* gone */ }
      const t = setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } }, graceMs);
      const r = await exited;
      clearTimeout(t);
      return r;
    },
  };
}

export function runScript(script, args = [], env = {}) {
  return execFileSync('bash', [path.join(repoRoot, script), ...args], {
    encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env },
  }).trim();
}
