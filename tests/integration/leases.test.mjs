// Slot reservations end whatever ends the work on a slot, against real llama-server processes:
// an index that fails on a full disk (a small tmpfs slot directory), a reload that switches the
// cache off while a restore or a snapshot waits for llama-server, a backend that fails after its
// slot was prepared, a client that leaves while it waits for a slot. After each, nothing stays
// reserved (the /metrics gauges are 0) and warmslot is alive. The relay (lib/relay.mjs) holds or
// fails calls at a chosen moment, which a real llama-server cannot be made to do.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { getJson, postJson, snapshotFiles, startLlama } from './lib/llama.mjs';
import { tempDir, waitFor } from './lib/procs.mjs';
import { startRelay } from './lib/relay.mjs';
import { startWarmslot, yamlConfig } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';
const cacheOff = 'routing:\n  reconcile_interval: 100ms\ncache:\n  enabled: false\n';

async function metric(ws, name) {
  const text = await (await fetch(`${ws.url}/metrics`)).text();
  return Number(text.match(new RegExp(`^${name} (\\d+)`, 'm'))?.[1] ?? NaN);
}

// Nothing reserved and nothing counted in flight: what an idle warmslot must show.
async function assertNothingReserved(ws) {
  await waitFor('no request in flight', async () =>
    (await getJson(`${ws.url}/warmslot/status`)).body.backends.every((b) => b.in_flight === 0), 15000);
  assert.equal(await metric(ws, 'warmslot_slots_reserved'), 0, 'no slot stays reserved');
  assert.equal(await metric(ws, 'warmslot_requests_in_flight'), 0);
}

async function routed(ws, n = 1) {
  await waitFor('routing', async () => {
    const b = (await getJson(`${ws.url}/health`)).body.backends ?? [];
    return b.length >= n && b.slice(0, n).every((x) => x.routing);
  }, 30000);
}

async function reloadWith(ws, backends, extra) {
  const count = () => (fs.readFileSync(ws.logFile, 'utf8').match(/config reloaded from/g) ?? []).length;
  const before = count();
  fs.writeFileSync(ws.configFile, yamlConfig({ backends, extra }));
  ws.proc.child.kill('SIGHUP');
  await waitFor('the reload', () => count() > before, 10000);
}

// A tmpfs of `mib` MiB, or null when this machine cannot mount one (not root, no CAP_SYS_ADMIN).
export function mountTmpfs(mib) {
  const dir = tempDir('tmpfs-slots');
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${mib}m`, 'tmpfs', dir], { stdio: 'pipe' });
    return { dir, unmount: () => execFileSync('umount', ['-l', dir]) };
  } catch {
    return null;
  }
}

// Writes `name` in `dir` until the filesystem is full; returns its path.
export function fillDisk(dir, name = 'filler') {
  const file = path.join(dir, name);
  const fd = fs.openSync(file, 'w');
  try {
    for (const size of [1 << 20, 4096, 64]) {
      const chunk = Buffer.alloc(size, 7);
      for (let i = 0; i < 1 << 20; i++) {
        try { fs.writeSync(fd, chunk); } catch (e) { if (e.code === 'ENOSPC') break; throw e; }
      }
    }
  } finally {
    fs.closeSync(fd);
  }
  return file;
}

// With --ctx-checkpoints 0 a hybrid slot that holds the document and a first question cannot roll
// back to the document's end, so warmslot restores the document's file into it (disk-policy's
// test). On a full disk the index cannot record that restore (SQLITE_FULL): the request is still
// answered, and its slot, the only one, is planned again (it stayed reserved for good).
test('qwen35 -np 1: an index error on a full disk during a restore leaks no reservation', { timeout: 300000 }, async (t) => {
  const fsys = mountTmpfs(16);
  if (!fsys) return t.skip('cannot mount a tmpfs here (needs root)');
  const llama = await startLlama({ arch: 'qwen35', slots: 1, ctx: 16384, slotSaveDir: fsys.dir,
    extra: ['--ctx-checkpoints', '0'] });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: fsys.dir }], extra: settings });
  let filler;
  try {
    await routed(ws);
    const doc = makeDocument(740, 7000);
    const ask = (q) => postJson(`${ws.url}/v1/chat/completions`, chat(doc, q));
    const first = await ask('What is on the first line?');
    assert.match(first.headers.get('x-warmslot-disk') ?? '', /^snapshot \d+ tokens/);
    const second = await ask('Summarise the third paragraph in one line.');
    assert.match(second.headers.get('x-warmslot-disk') ?? '', /^slot kept/);  // and learned the cost
    filler = fillDisk(fsys.dir);
    const third = await ask('Which word comes last?');
    assert.equal(third.status, 200, JSON.stringify(third.body));
    assert.match(fs.readFileSync(ws.logFile, 'utf8'), /disk tier skipped for this request: .*(full|disk)/i);
    await assertNothingReserved(ws);
    const fourth = await ask('How many lines are there?');
    assert.equal(fourth.status, 200);
    assert.equal(fourth.headers.get('x-warmslot-slot'), '0', 'the only slot is pinned again');
    await assertNothingReserved(ws);
  } finally {
    if (filler) fs.rmSync(filler, { force: true });
    await ws.stop();
    await llama.stop();
    fsys.unmount();
  }
});

// A reload that switches the cache off while a request's slot is being prepared: the restore
// after the save of the slot's own prefix still ends on the index it began with (warmslot
// crashed: the index was looked up again after the reload and was gone).
test('llama -np 1: a reload to cache disabled while a slot is prepared keeps warmslot serving', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 1, ctx: 16384 });
  const relay = await startRelay(() => llama.url);
  const backends = [{ name: 'b', url: relay.url, slotSaveDir: llama.saveDir }];
  const ws = await startWarmslot({ backends, extra: `${settings}  snapshot_after_uses: 2\n` });
  try {
    await routed(ws);
    const p = makeDocument(750, 6000);
    const x = makeDocument(751, 6000);
    const ask = (doc, q) => postJson(`${ws.url}/v1/chat/completions`, chat(doc, q));
    // Uses are counted when a request brings the prefix to a slot: P's second time saves it.
    await ask(p, 'Q1?');
    await ask(x, 'Q1?');
    assert.match((await ask(p, 'Q2?')).headers.get('x-warmslot-disk') ?? '', /^snapshot \d+ tokens/);
    const y = makeDocument(752, 6000);
    assert.equal((await ask(y, 'Q1?')).headers.get('x-warmslot-disk'), null, 'y is used once: not saved');
    // P again on the only slot: y is saved first (worth keeping), then P's file restored.
    relay.holdFrom = /action=save/;
    const pending = ask(p, 'Q3?');
    await waitFor('the save of y', () => relay.held > 0, 120000, 20);
    await reloadWith(ws, backends, cacheOff);
    relay.release();
    const r = await pending;
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.match(r.headers.get('x-warmslot-disk') ?? '', /^restored \d+ tokens/, 'the preparation begun goes on');
    assert.ok(ws.proc.running, 'warmslot is alive');
    await assertNothingReserved(ws);
    const later = await ask(x, 'Q3?');
    assert.equal(later.status, 200);
    assert.equal(later.headers.get('x-warmslot-disk'), null, 'the cache is off now');
  } finally {
    await ws.stop();
    await relay.stop();
    await llama.stop();
  }
});

// The planned backend's slot was prepared (a snapshot of the document), then the request itself
// failed there and went to another backend: that answer says nothing of a disk action it did not
// have (the earlier try's reached its headers and the restore judge).
test('llama: a failover answer carries no disk action of the backend that failed', { timeout: 300000 }, async () => {
  const a = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const b = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const relay = await startRelay(() => a.url);
  relay.closeConnections = true;  // a fresh connection each time: its failure is the backend's
  const ws = await startWarmslot({ backends: [{ name: 'a', url: relay.url, slotSaveDir: a.saveDir },
    { name: 'b', url: b.url, slotSaveDir: b.saveDir }], extra: settings });
  try {
    await routed(ws, 2);
    relay.failPaths = /^\/v1\/chat\/completions/;
    let r;
    // The first plan goes to either backend; a request planned on `a` primes and saves there.
    for (let i = 0; i < 6 && relay.failed === 0; i++) {
      r = await postJson(`${ws.url}/v1/chat/completions`, chat(makeDocument(760 + i, 6000), 'Q?'));
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    assert.ok(relay.failed > 0, 'a request was planned on a');
    assert.equal(r.headers.get('x-warmslot-route'), 'failover');
    assert.equal(r.headers.get('x-warmslot-backend'), 'b');
    assert.ok(snapshotFiles(a.saveDir).length > 0, 'a saved the prefix before the request failed there');
    assert.equal(r.headers.get('x-warmslot-disk'), null, JSON.stringify(r.headers.get('x-warmslot-disk')));
    assert.ok(Number(r.headers.get('x-warmslot-primed-tokens')) > 0, 'the priming on a is still counted');
    relay.failPaths = null;
    await assertNothingReserved(ws);
  } finally {
    await ws.stop();
    await relay.stop();
    await a.stop();
    await b.stop();
  }
});

// A client that leaves while its request waits for the busy slot holding its document: nothing
// was sent, so what warmslot believes of the other slot stays (it was forgotten, and the next
// request on that slot's document was planned as a miss).
test('llama: a client leaving during a wait for a slot forgets no slot belief', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }],
    extra: 'routing:\n  reconcile_interval: 100ms\n' });
  const long = new AbortController();
  try {
    await routed(ws);
    const d = makeDocument(770, 12000);
    const e = makeDocument(771, 6000);
    const onD = await postJson(`${ws.url}/v1/chat/completions`, chat(d, 'Q1?'));
    const onE = await postJson(`${ws.url}/v1/chat/completions`, chat(e, 'Q1?'));
    const slotD = onD.headers.get('x-warmslot-slot');
    const slotE = onE.headers.get('x-warmslot-slot');
    assert.notEqual(slotD, slotE);
    // A long answer keeps D's slot busy.
    const busy = await fetch(`${ws.url}/v1/chat/completions`, { method: 'POST', signal: long.signal,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(chat(d, 'Q2?', { max_tokens: 100000, stream: true, ignore_eos: true })) });
    assert.equal(busy.headers.get('x-warmslot-slot'), slotD);
    const reader = busy.body.getReader();
    await reader.read();
    const leaving = new AbortController();
    const waiting = fetch(`${ws.url}/v1/chat/completions`, { method: 'POST', signal: leaving.signal,
      headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat(d, 'Q3?')) }).catch(() => null);
    // Waiting: counted in flight, and no other slot was taken for it.
    await waitFor('the second request on D to wait', async () => {
      const s = (await getJson(`${ws.url}/warmslot/status`)).body.backends[0];
      return s.in_flight === 2 && s.slots.find((x) => String(x.id) === slotE).state === 'idle';
    }, 30000, 10);
    leaving.abort();
    await waiting;
    await waitFor('the leaving request to end', async () =>
      (await getJson(`${ws.url}/warmslot/status`)).body.backends[0].in_flight === 1, 15000);
    long.abort();
    await waitFor('the long request to end', async () =>
      (await getJson(`${ws.url}/warmslot/status`)).body.backends[0].in_flight === 0, 15000);
    const again = await postJson(`${ws.url}/v1/chat/completions`, chat(e, 'Q4?'));
    assert.equal(again.headers.get('x-warmslot-slot'), slotE);
    assert.equal(again.headers.get('x-warmslot-route'), 'hit', 'E is still known to be in its slot');
    assert.match(fs.readFileSync(ws.logFile, 'utf8'), /client_gone/);
    await assertNothingReserved(ws);
  } finally {
    long.abort();
    await ws.stop();
    await llama.stop();
  }
});

// A request sent without id_slot (here: queued, the only slot is reserved) must not take the slot
// while warmslot prepares it: between the priming and the save llama-server sees the slot idle,
// and such a request ran there, so the save wrote its prompt under the prefix's key (the file
// held the wrong prompt, and the request being prepared waited behind it).
test('llama -np 1: a request llama-server places itself waits until a slot is prepared', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 1, ctx: 16384 });
  const relay = await startRelay(() => llama.url);
  const ws = await startWarmslot({ backends: [{ name: 'b', url: relay.url, slotSaveDir: llama.saveDir }], extra: settings });
  try {
    await routed(ws);
    const doc = makeDocument(780, 6000);
    relay.holdOnly = /action=save/;
    const prepared = postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'Q1?'));
    await waitFor('the save of the primed prefix', () => relay.held > 0, 120000, 20);
    let otherDone = false;
    const other = postJson(`${ws.url}/v1/chat/completions`, chat('A short one-off question.', 'Hi?'))
      .finally(() => { otherDone = true; });
    // It waits in warmslot (counted in flight), or, as before, ran on the slot being prepared.
    await waitFor('the other request to be in flight or done', async () => otherDone ||
      (await getJson(`${ws.url}/warmslot/status`)).body.backends[0].in_flight === 2, 15000, 10);
    relay.release();
    const [p, o] = await Promise.all([prepared, other]);
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(o.status, 200, JSON.stringify(o.body));
    const m = (p.headers.get('x-warmslot-disk') ?? '').match(/^snapshot (\d+) tokens/);
    assert.ok(m, `the prefix was saved (${p.headers.get('x-warmslot-disk')})`);
    assert.ok(Number(m[1]) > 5000, `the file holds the document, not the other prompt (${m[1]} tokens)`);
    assert.ok(p.body.timings.prompt_n < 100, `the request found its prefix in the slot (${p.body.timings.prompt_n})`);
    await assertNothingReserved(ws);
  } finally {
    await ws.stop();
    await relay.stop();
    await llama.stop();
  }
});

// A save that llama-server finishes after warmslot gave up on it (slot_call_timeout) writes a
// file that no row describes: outside the budget, never restored. The next snapshot into the
// directory deletes it; the files that rows describe stay.
test('llama -np 1: a slot file written after its save timed out is deleted by the next snapshot', { timeout: 300000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 1, ctx: 16384 });
  const relay = await startRelay(() => llama.url);
  const extra = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n  slot_call_timeout: 1s\n';
  const ws = await startWarmslot({ backends: [{ name: 'b', url: relay.url, slotSaveDir: llama.saveDir }], extra });
  try {
    await routed(ws);
    relay.delaySaves = true;
    const first = await postJson(`${ws.url}/v1/chat/completions`, chat(makeDocument(781, 6000), 'Q1?'));
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.ok(relay.delayedSaves >= 1, 'the prefix was primed and its save sent');
    assert.equal(first.headers.get('x-warmslot-disk') ?? '', '', 'no snapshot: its save timed out');
    assert.deepEqual(snapshotFiles(llama.saveDir), [], 'nothing written yet');
    // Another document takes the only slot (saves pause after the failed one, or time out too).
    const second = await postJson(`${ws.url}/v1/chat/completions`, chat(makeDocument(782, 6000), 'Q2?'));
    assert.equal(second.status, 200, JSON.stringify(second.body));
    await relay.release();  // llama-server now writes the first document's file: nobody waits
    const lateFiles = snapshotFiles(llama.saveDir);
    assert.ok(lateFiles.length >= 1, 'llama-server wrote the late file');

    // The next snapshot: a warm-up saves what the slot holds, then the warmed document.
    const warm = await postJson(`${ws.url}/admin/warm`, { model: 'm', system: makeDocument(783, 6000) });
    assert.equal(warm.status, 200, JSON.stringify(warm.body));
    const files = snapshotFiles(llama.saveDir).sort();
    for (const f of lateFiles) assert.ok(!files.includes(f), `the late file ${f} is gone (${files})`);
    const dirs = (await getJson(`${ws.url}/warmslot/status`)).body.disk.dirs;
    const indexed = dirs.flatMap((d) => d.files.map((f) => f.file)).sort();
    assert.ok(files.length >= 1, 'the warmed document was saved');
    assert.deepEqual(indexed, files, 'every slot file left has its row');
    await assertNothingReserved(ws);
  } finally {
    await ws.stop();
    await relay.stop();
    await llama.stop();
  }
});
