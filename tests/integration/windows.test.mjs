// warmslot.exe (deploy/windows/cross-build.sh) under wine: check-config on the shipped example;
// in a console and as a service under wine's service manager, a server that answers /health and
// proxies a chat request to a Linux llama-server on loopback, then stops gracefully. Skipped,
// with the reason, when the exe was not built or wine is missing.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot, startProcess, tempDir, waitFor } from './lib/procs.mjs';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { yamlConfig } from './lib/warmslot.mjs';

const exe = process.env.WARMSLOT_WIN_EXE ?? path.join(repoRoot, 'build-windows/proxy/warmslot.exe');
const wine = spawnSync('sh', ['-c', 'command -v wine'], { encoding: 'utf8' }).stdout.trim();
const skip = !fs.existsSync(exe)
  ? `${exe} was not built (run deploy/windows/cross-build.sh)`
  : !wine ? 'wine is not installed (deploy/windows/cross-build.sh installs it)' : false;

// One wine prefix for every run: creating one takes a while.
const cache = process.env.WARMSLOT_CACHE
  ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'warmslot');
const wineEnv = {
  WINEPREFIX: process.env.WINEPREFIX ?? path.join(cache, 'wine-prefix'),
  WINEDEBUG: '-all', WINEDLLOVERRIDES: 'mscoree,mshtml=',
};
// wine keeps a wineserver (and, after the service test, services.exe) running for the prefix.
after(() => { if (!skip) spawnSync('wineserver', ['-k'], { env: { ...process.env, ...wineEnv } }); });

// Windows sees the Linux file system as drive Z:.
const winPath = (p) => `Z:${p.replaceAll('/', '\\')}`;
const runExe = (args, env = {}) => spawnSync(wine, [exe, ...args],
  { encoding: 'utf8', env: { ...process.env, ...wineEnv, ...env }, timeout: 120000 });

test('warmslot.exe check-config accepts the example and rejects a bad file', { skip }, () => {
  const example = winPath(path.join(repoRoot, 'config/warmslot.example.yaml'));
  const ok = runExe(['check-config', example], { WARMSLOT_API_KEY: 'a-long-enough-key' });
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /: ok \(2 backends\)/);
  const dir = tempDir('win');
  const bad = path.join(dir, 'bad.yaml');
  fs.writeFileSync(bad, 'backends:\n  - name: a\n    url: http://127.0.0.1:1\nlimits:\n  max_body: 1MiB\n');
  const r = runExe(['check-config', winPath(bad)]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /:5: limits\.max_body: unknown key/);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('warmslot.exe serves /health and proxies a chat request to llama-server', { skip }, async () => {
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  const dir = tempDir('win');
  const config = path.join(dir, 'warmslot.yaml');
  fs.writeFileSync(config, yamlConfig({ backends: [{ name: 'a', url: llama.url }] }));
  const logFile = path.join(dir, 'warmslot.log');
  const proc = startProcess(wine, [exe, '--config', winPath(config)],
    { logFile, env: wineEnv });
  try {
    const url = await waitFor('warmslot.exe to listen', () => {
      if (!proc.running) throw new Error(`warmslot.exe exited: ${fs.readFileSync(logFile, 'utf8')}`);
      return fs.readFileSync(logFile, 'utf8').match(/warmslot listening on (http:\/\/\S+)/)?.[1];
    }, 120000, 50);
    const health = await getJson(`${url}/health`);
    assert.equal(health.status, 200, JSON.stringify(health.body));
    const chat = await postJson(`${url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 8,
    });
    assert.equal(chat.status, 200, JSON.stringify(chat.body));
    assert.equal(chat.body.object, 'chat.completion');
    assert.ok(chat.body.usage.prompt_tokens > 0);
    // Ctrl-C (wine turns SIGINT into a console control event): the graceful stop.
    const r = await proc.stop('SIGINT', 30000);
    assert.equal(r.code, 0, `${JSON.stringify(r)}\n${fs.readFileSync(logFile, 'utf8')}`);
    assert.match(fs.readFileSync(logFile, 'utf8'), /stopped/);
  } finally {
    await proc.stop('SIGKILL');
    await llama.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// The live (not zombie) processes of the service configured with `config`, by their command line.
function serviceProcesses(config) {
  const needle = `service run --config ${winPath(config)}`;
  const pids = [];
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      const state = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '')[0];
      if (cmdline.includes(needle) && state !== 'Z') pids.push(Number(pid));
    } catch { /* the process ended while we looked */ }
  }
  return pids;
}

// wine makes a process that runs a service dispatcher a "system process". When no other process
// has run in the prefix for a moment, wineserver shuts the prefix down: services.exe exits and the
// dispatcher ends the service process (ExitProcess) without a stop control; the next wine command
// boots the prefix again and services.exe auto-starts the service anew. A Windows machine keeps
// running between commands, so the test keeps the prefix up with a persistent wineserver, booted
// with its output going nowhere (services.exe and the service inherit the booting process's
// stderr, which would keep the pipes of later commands open).
function persistentWineserver() {
  const opts = { env: { ...process.env, ...wineEnv }, stdio: 'ignore', timeout: 60000 };
  spawnSync('wineserver', ['-k'], opts);
  spawnSync('wineserver', ['-w'], opts);
  assert.equal(spawnSync('wineserver', ['-p'], opts).status, 0, 'wineserver -p');
  assert.equal(spawnSync(wine, ['cmd', '/c', 'exit'], opts).status, 0, 'wine boot');
}

test('warmslot.exe serves as a service under wine\'s service manager and stops gracefully', { skip }, async (t) => {
  persistentWineserver();
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  const dir = tempDir('win');
  const config = path.join(dir, 'warmslot.yaml');
  fs.writeFileSync(config, yamlConfig({ backends: [{ name: 'a', url: llama.url }] }));
  const logFile = path.join(dir, 'logs', 'warmslot.log');  // directory made by `service install`
  let logFrom = 0;  // what an earlier start attempt wrote is not this one's
  const log = () => fs.readFileSync(logFile, 'utf8').slice(logFrom);
  const svc = (...args) => runExe(['service', ...args]);
  // The wine prefix persists, and booting it auto-starts a service an interrupted run left.
  svc('stop');
  svc('uninstall');
  let installed;
  try {
    installed = svc('install', '--config', winPath(config), '--log', winPath(logFile));
    assert.equal(installed.status, 0, installed.stderr);
    assert.match(installed.stdout, /service run --config/);
    let started = svc('start');
    if (started.status !== 0) {
      // Seen once in about ten runs, on a loaded machine: wine's StartService answered "Internal
      // error." while the same start works on the next try. Reported, then tried once more from
      // a stopped service; a second failure fails the test.
      t.diagnostic(`first start failed: ${started.stderr.trim()}; log: ${fs.existsSync(logFile) ? log() : '(none)'}`);
      svc('stop');
      await waitFor('no service process', () => serviceProcesses(config).length === 0, 30000);
      logFrom = fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8').length : 0;
      started = svc('start');
    }
    assert.equal(started.status, 0, started.stderr);
    assert.match(started.stdout, /service warmslot running/);
    // RUNNING is reported once warmslot listens; the service logs only to its file.
    const port = log().match(/listening on 127\.0\.0\.1:(\d+)/)?.[1];
    assert.ok(port, log());
    const url = `http://127.0.0.1:${port}`;
    const [pid, ...others] = serviceProcesses(config);
    assert.ok(pid && others.length === 0, `one service process: ${[pid, ...others]}`);

    const health = await getJson(`${url}/health`);
    assert.equal(health.status, 200, JSON.stringify(health.body));
    assert.equal(health.body.warmslot.status, 'ok');
    const chat = await postJson(`${url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 8,
    });
    assert.equal(chat.status, 200, JSON.stringify(chat.body));
    assert.equal(chat.body.object, 'chat.completion');
    assert.ok(chat.body.usage.prompt_tokens > 0);
    assert.deepEqual(serviceProcesses(config), [pid], 'the same process still serves');

    const stopped = svc('stop');
    assert.equal(stopped.status, 0, stopped.stderr);
    assert.match(stopped.stdout, /service warmslot stopped/);
    await waitFor('the service process to exit', () => serviceProcesses(config).length === 0, 30000);
    await assert.rejects(fetch(`${url}/health`), 'nothing listens on the port any more');
    // One process served and stopped: it listened once, the stop control took the graceful path
    // (drain, then "stopped"), and it reported STOPPED with exit code 0.
    const text = log();
    assert.equal(text.match(/listening on /g)?.length, 1, text);
    assert.match(text, /POST \/v1\/chat\/completions 200/);
    assert.match(text, /stop requested: stopping[\s\S]*\bstopped\r?\n[\s\S]*service reports stopped \(exit code 0\)/);
  } finally {
    if (installed?.status === 0) {
      svc('stop');
      const removed = svc('uninstall');
      assert.equal(removed.status, 0, removed.stderr);
    }
    await llama.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
