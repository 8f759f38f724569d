// deploy/cluster/cluster.sh: two warmslot hosts in network namespaces behind HAProxy. A document's
// questions stay on one host; when that host's llama-server dies, the answer it was streaming ends
// with an SSE error event and its documents move to the other host; the script removes its
// namespaces and processes on SIGTERM and on SIGINT.
// Needs root and haproxy (deploy/install-deps.sh); WARMSLOT_SKIP_CLUSTER=1 skips it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { freePort, repoRoot, tempDir, waitFor } from './lib/procs.mjs';
import { makeDocument } from './lib/text.mjs';
import { balancerIdle, balancerStatus, hostPromptTokens, hostTokenCount, startCluster, streamOnce } from './lib/cluster.mjs';

const haveHaproxy = () => {
  try { execFileSync('haproxy', ['-v'], { stdio: 'ignore' }); return true; } catch { return false; }
};
const skip = process.env.WARMSLOT_SKIP_CLUSTER === '1' ? 'WARMSLOT_SKIP_CLUSTER=1'
  : process.getuid?.() !== 0 ? 'needs root (network namespaces)'
    : !haveHaproxy() ? 'no haproxy (deploy/install-deps.sh)' : false;

const namespaces = () => execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
  .split('\n').map((l) => l.split(' ')[0]).filter((n) => n.startsWith('wsc-'));
const alive = (pid) => {
  try { process.kill(pid, 0); } catch { return false; }
  try { return !/^\d+ \(.*\) Z/s.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return false; }
};
const pidsOf = (info) => [info.haproxy_pid, ...info.hosts.flatMap((h) => [h.llama_pid, h.warmslot_pid])];

// A free port whose next one (the balancer's stats page) is free too, at most 20 tries.
async function freePortPair() {
  for (let i = 0; i < 20; i++) {
    const port = await freePort();
    const next = await new Promise((resolve) => {
      const srv = net.createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port + 1, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
    if (next) return port;
  }
  throw new Error('no two free consecutive loopback ports');
}

async function start(dir, extra = []) {
  return startCluster(['--port', String(await freePortPair()), '--slots', '3', '--ctx', '8192', '--duration', '300', ...extra],
    { logFile: path.join(dir, 'cluster.log'), timeoutMs: 180000 });
}

async function assertGone(info) {
  await waitFor('the cluster\'s processes to end', () => pidsOf(info).every((p) => !alive(p)), 15000, 100);
  assert.deepEqual(namespaces(), []);
}

// New documents (seeds from `seed`, `bytes` each) until one landed on each host: { h1, h2 }, each
// that host's first request. `check(r)` on every answer.
async function documentOnEachHost(info, seed, bytes, check = () => {}) {
  const on = {};
  for (let d = 0; d < 16 && !(on.h1 && on.h2); d++) {
    const req = { system: makeDocument(seed + d, bytes), question: 'First question?' };
    const r = await streamOnce(info.balancer, req);
    assert.ok(r.ok, JSON.stringify(r));
    check(r);
    on[r.host] ??= req;
  }
  assert.ok(on.h1 && on.h2, `documents on both hosts: ${Object.keys(on)}`);
  return on;
}

test('affinity keeps a document on one host; a dead host\'s documents move; SIGTERM cleans up', { skip, timeout: 300000 }, async () => {
  assert.deepEqual(namespaces(), [], 'no wsc-* namespace before the test');
  const cluster = await start(tempDir('cluster'));
  const { info } = cluster;
  try {
    assert.equal(info.hosts.length, 2);
    // Documents until one lands on each host; then each is asked again and stays there.
    const on = await documentOnEachHost(info, 500, 1500);
    for (const h of ['h1', 'h2']) {
      assert.ok(await balancerIdle(info), 'no request in flight before the affinity check');
      const r = await streamOnce(info.balancer, { ...on[h], question: 'Second question?' });
      assert.ok(r.ok, JSON.stringify(r));
      assert.equal(r.host, h);
      assert.ok(r.timings.cache_n > 1000, `the second question reused the document: ${JSON.stringify(r.timings)}`);
    }
    // A long answer streams from h2 when its llama-server dies: it ends with an SSE error event.
    const h2 = info.hosts.find((h) => h.name === 'h2');
    let streaming;
    const started = new Promise((resolve) => { streaming = resolve; });
    const long = streamOnce(info.balancer, { ...on.h2, question: 'A long story?' }, { max_tokens: 5000, ignore_eos: true },
      (n) => { if (n === 20) streaming(); });
    await Promise.race([started, long]);
    process.kill(h2.llama_pid, 'SIGKILL');
    const cut = await long;
    assert.equal(cut.status, 200);
    assert.equal(cut.host, 'h2');
    assert.match(cut.error ?? '', /backend failed during the stream/, JSON.stringify(cut));
    await waitFor('HAProxy to see h2 down', async () => (await balancerStatus(info)).h2?.startsWith('DOWN'), 20000, 100);
    const moved = await streamOnce(info.balancer, { ...on.h2, question: 'Third question?' });
    assert.ok(moved.ok, JSON.stringify(moved));
    assert.equal(moved.host, 'h1');
  } finally {
    const r = await cluster.stop();
    assert.equal(r.code, 143, `cluster.sh exit: ${JSON.stringify(r)}`);
  }
  await assertGone(info);
});

// The small version of docs/scaling.md's host-loss table with a shared tier: a GlusterFS volume
// with a brick in each host's namespace (cluster.sh --shared gluster) when glusterd is installed,
// else a plain directory both hosts see (they are namespaces of one machine), said in the output.
const haveGluster = () => {
  try { execFileSync('glusterd', ['--version'], { stdio: 'ignore' }); return true; } catch { return false; }
};

test('a lost host\'s documents are restored on the other host from the shared tier', { skip, timeout: 300000 }, async () => {
  const dir = tempDir('cluster');
  const gluster = haveGluster();
  const plain = gluster ? null : fs.mkdtempSync(path.join(dir, 'shared-'));
  console.log(gluster ? 'shared tier: a GlusterFS volume, one brick in each host\'s namespace'
    : `shared tier: a plain directory both hosts see (${plain}): glusterd is not installed`);
  const cluster = await start(dir, ['--disk', '--shared', gluster ? 'gluster' : plain]);
  const { info } = cluster;
  const shared = info.hosts[0].shared;
  try {
    const on = await documentOnEachHost(info, 600, 3000,
      // Streamed on the plain model: each document's file is saved after its answer.
      (r) => assert.match(r.disk, /^snapshot \d+ tokens after the answer$/));
    const key = (h) => fs.readdirSync(shared).filter((n) => n.endsWith('.json'))
      .map((n) => JSON.parse(fs.readFileSync(path.join(shared, n), 'utf8')))
      .filter((m) => m.publisher.endsWith(`/${h}-gpu0`));
    await waitFor('both hosts to publish', () => key('h1').length > 0 && key('h2').length > 0, 30000, 100);
    // Host 2 is lost: its llama-server and its warmslot, with its slot files.
    const h1 = info.hosts.find((h) => h.name === 'h1');
    const h2 = info.hosts.find((h) => h.name === 'h2');
    process.kill(h2.llama_pid, 'SIGKILL');
    process.kill(h2.warmslot_pid, 'SIGKILL');
    fs.rmSync(path.join(h2.dir, 'slots'), { recursive: true, force: true });
    if (gluster) {  // its brick and its glusterd go with it
      execFileSync('bash', [path.join(repoRoot, 'deploy/cluster/gluster.sh'), 'kill', info.dir, 'h2'], { stdio: 'ignore', timeout: 60000 });
    }
    await waitFor('HAProxy to see h2 down', async () => (await balancerStatus(info)).h2?.startsWith('DOWN'), 20000, 100);
    const question = 'Second question?';
    const before = await hostPromptTokens(h1);
    const moved = await streamOnce(info.balancer, { ...on.h2, question });
    const computed = (await hostPromptTokens(h1)) - before;
    assert.ok(moved.ok, JSON.stringify(moved));
    assert.equal(moved.host, 'h1');
    assert.match(moved.disk, /^restored \d+ tokens \(from the shared tier, copied\)$/);
    const bound = (await hostTokenCount(h1, question)) + 64;
    assert.ok(computed <= bound, `h1 computed ${computed} prompt tokens for h2's document, bound ${bound}`);
  } finally {
    const r = await cluster.stop();
    assert.equal(r.code, 143, `cluster.sh exit: ${JSON.stringify(r)}`);
  }
  await assertGone(info);
});

test('cluster.sh removes its namespaces and processes on SIGINT', { skip, timeout: 240000 }, async () => {
  const cluster = await start(tempDir('cluster'), ['--hosts', '1']);
  const { info } = cluster;
  assert.deepEqual(namespaces().sort(), ['wsc-h1', 'wsc-lb']);
  process.kill(cluster.pid, 'SIGINT');
  const r = await cluster.stop();
  assert.equal(r.code, 130, `cluster.sh exit: ${JSON.stringify(r)}`);
  await assertGone(info);
});
