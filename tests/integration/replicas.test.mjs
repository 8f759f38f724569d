// Two llama-server replicas of one model on one host (-np 1 each): a document computed and saved
// on one is restored on the other when the other gets it (here: the first one's only slot is
// busy with a long generation), with one shared slot directory and with a directory each (the
// file is hard-linked, or copied across file systems, into the other's directory).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { getJson, postJson, questionTokens, snapshotFiles, startLlama } from './lib/llama.mjs';
import { waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { diskSettings } from './lib/ask.mjs';
import { answerTokens, assertSameAnswer, freshAnswer } from './lib/answers.mjs';
import { chat, makeDocument } from './lib/text.mjs';

async function routed(ws, count) {
  await waitFor('backends to be routed', async () =>
    (await getJson(`${ws.url}/health`)).body.backends?.filter((b) => b.routing).length >= count, 30000);
}

async function promptTokensTotal(llama) {
  const text = await (await fetch(`${llama.url}/metrics`)).text();
  return Number(text.match(/^llamacpp:prompt_tokens_total (\d+)/m)[1]);
}

// warmslot_replica_files_total by result, the non-zero ones.
async function replicaFiles(ws) {
  const text = await (await fetch(`${ws.url}/metrics`)).text();
  return Object.fromEntries([...text.matchAll(/^warmslot_replica_files_total\{result="(\w+)"\} (\d+)$/mg)]
    .filter((m) => m[2] !== '0').map((m) => [m[1], Number(m[2])]));
}

// Answers of answerTokens tokens: long enough to tell whose state a slot held.
const body = (doc, q) => chat(doc, q, { max_tokens: answerTokens });

async function ask(ws, doc, q) {
  const r = await postJson(`${ws.url}/v1/chat/completions`, body(doc, q));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { disk: r.headers.get('x-warmslot-disk') ?? '', backend: r.headers.get('x-warmslot-backend'),
    processed: Number(r.headers.get('x-warmslot-processed-tokens')), route: r.headers.get('x-warmslot-route') ?? '',
    text: r.body.choices[0].message.content, cached: r.body.timings.cache_n };
}

function indexRows(dir) {
  const out = execFileSync('sqlite3', ['-separator', ' ', path.join(dir, 'warmslot-index.sqlite'),
    'SELECT key, file, bytes, tokens FROM snapshots ORDER BY key;'], { encoding: 'utf8' });
  return out.trim().split('\n').filter(Boolean);
}

// Starts the long generation on the document's backend through warmslot (a hit there) and
// resolves once that backend's only slot is processing it. abort() ends it.
async function keepBusy(ws, llama, doc) {
  const ctl = new AbortController();
  const body = chat(doc, 'Tell a very long story.', { max_tokens: 10000, ignore_eos: true });
  const done = fetch(`${ws.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    signal: ctl.signal,
  }).then(async (r) => { await r.text(); return 'finished'; }, () => 'aborted');
  await waitFor('the long generation to run', async () =>
    (await getJson(`${llama.url}/slots`)).body[0].is_processing, 30000);
  return { done, abort: () => ctl.abort() };
}

// The document on the first replica, then on the second while the first is busy. `dirs`: the
// two save directories (the same one twice: shared); `counted`: warmslot_replica_files_total then.
async function documentMovesOver(arch, dirs, expectDisk, counted) {
  const [a, b] = [await startLlama({ arch, slots: 1, ctx: 16384, slotSaveDir: dirs[0] }),
    await startLlama({ arch, slots: 1, ctx: 16384, slotSaveDir: dirs[1] })];
  const ws = await startWarmslot({ backends: [{ name: 'a', url: a.url, slotSaveDir: dirs[0] },
    { name: 'b', url: b.url, slotSaveDir: dirs[1] }], extra: diskSettings });
  let busy;
  try {
    await routed(ws, 2);
    const doc = makeDocument(900, 4000);
    const first = await ask(ws, doc, 'What is on the first line?');
    assert.equal(first.backend, 'a');
    assert.match(first.disk, /^snapshot \d+ tokens$/);
    const rowsOfA = indexRows(dirs[0]);
    busy = await keepBusy(ws, a, doc);
    const before = await promptTokensTotal(b);
    const q = 'And what is on the last line?';
    const moved = await ask(ws, doc, q);
    const computed = (await promptTokensTotal(b)) - before;
    busy.abort();
    assert.equal(await busy.done, 'aborted', 'a was busy all along');
    assert.equal(moved.backend, 'b');
    assert.match(moved.disk, expectDisk);
    const bound = (await questionTokens(b.url, q)) + 64;
    assert.ok(computed <= bound, `b computed ${computed} prompt tokens, bound ${bound}`);
    assert.equal(moved.processed, computed, 'what warmslot reports is what llama-server computed');
    // The source directory keeps its rows and files; the receiving one indexes what it got.
    assert.deepEqual(indexRows(dirs[0]).filter((r) => rowsOfA.includes(r)), rowsOfA);
    for (const r of rowsOfA) assert.ok(fs.existsSync(path.join(dirs[0], r.split(' ')[1])));
    assert.deepEqual(indexRows(dirs[1]).map((r) => r.split(' ')[1]), snapshotFiles(dirs[1]).sort());
    assert.deepEqual(await replicaFiles(ws), counted);
    // The restored file answers what a llama-server like b computes from scratch.
    assertSameAnswer(moved, await freshAnswer(b, body(doc, q)), 'restored from the replica\'s file');
  } finally {
    busy?.abort();
    await ws.stop();
    await a.stop();
    await b.stop();
  }
}

const tempDir = (root, prefix) => fs.mkdtempSync(path.join(root, `warmslot-${prefix}-`));

for (const arch of ['llama', 'qwen35']) {
  test(`${arch}: separate slot directories: the replica's file is linked and restored`, { timeout: 300000 }, async () => {
    const dirs = [tempDir(os.tmpdir(), 'slots-a'), tempDir(os.tmpdir(), 'slots-b')];
    await documentMovesOver(arch, dirs, /^restored \d+ tokens \(from replica a, linked\)$/,
      { linked: 1 });
    const [file] = snapshotFiles(dirs[1]);
    assert.equal(fs.statSync(path.join(dirs[1], file)).ino, fs.statSync(path.join(dirs[0], file)).ino);
  });

  test(`${arch}: one shared slot directory: the replica restores the file the other saved`, { timeout: 300000 }, async () => {
    const dir = tempDir(os.tmpdir(), 'slots-shared');
    await documentMovesOver(arch, [dir, dir], /^restored \d+ tokens$/, {});
  });
}

test('llama: directories on two file systems: the replica\'s file is copied', { timeout: 300000 }, async (t) => {
  if (!fs.existsSync('/dev/shm') || fs.statSync('/dev/shm').dev === fs.statSync(os.tmpdir()).dev) {
    t.skip('no second file system here');
    return;
  }
  const dirs = [tempDir('/dev/shm', 'slots-a'), tempDir(os.tmpdir(), 'slots-b')];
  try {
    await documentMovesOver('llama', dirs, /^restored \d+ tokens \(from replica a, copied\)$/,
      { copied: 1 });
    const [file] = snapshotFiles(dirs[1]);
    assert.ok(fs.readFileSync(path.join(dirs[1], file)).equals(fs.readFileSync(path.join(dirs[0], file))));
  } finally {
    fs.rmSync(dirs[0], { recursive: true, force: true });
  }
});

// Two -np 1 replicas a and b of `arch` with their own save directories behind one warmslot:
// `fn({ ws, a, b, doc })` after a document was asked (and saved) on a. Stops everything.
async function withDocumentOnA(arch, extra, fn) {
  const a = await startLlama({ arch, slots: 1, ctx: 16384 });
  const b = await startLlama({ arch, slots: 1, ctx: 16384 });
  const ws = await startWarmslot({ backends: [{ name: 'a', url: a.url, slotSaveDir: a.saveDir },
    { name: 'b', url: b.url, slotSaveDir: b.saveDir }], extra: `${diskSettings}${extra}` });
  try {
    await routed(ws, 2);
    const doc = makeDocument(901, 4000);
    assert.match((await ask(ws, doc, 'Q1?')).disk, /^snapshot \d+ tokens$/);
    await fn({ ws, a, b, doc });
  } finally {
    await ws.stop();
    await a.stop();
    await b.stop();
  }
}

// The document again while a is busy: it goes to b, which computes it and saves its own file.
async function computedOnB(ws, a, b, doc) {
  const busy = await keepBusy(ws, a, doc);
  try {
    const moved = await ask(ws, doc, 'Q2?');
    assert.equal(moved.backend, 'b');
    assert.match(moved.disk, /^snapshot \d+ tokens$/, 'computed and saved on b');
    assert.ok(moved.processed >= 3000, `the document was computed (${moved.processed})`);
  } finally {
    busy.abort();
  }
}

test('llama: a replica\'s file cut short is a miss: computed again, the source index untouched', { timeout: 300000 }, async () => {
  await withDocumentOnA('llama', '', async ({ ws, a, b, doc }) => {
    const rowsOfA = indexRows(a.saveDir);
    const [file] = snapshotFiles(a.saveDir);
    const full = path.join(a.saveDir, file);
    fs.truncateSync(full, Math.floor(fs.statSync(full).size / 2));  // as if still being written
    await computedOnB(ws, a, b, doc);
    assert.deepEqual(await replicaFiles(ws), { missing: 1 });
    assert.deepEqual(indexRows(a.saveDir), rowsOfA, 'the source index is untouched');
    assert.ok(fs.existsSync(full));
  });
});

test('llama: cache.replica_files false: each directory restores only its own files', { timeout: 300000 }, async () => {
  await withDocumentOnA('llama', '  replica_files: false\n', async ({ ws, a, b, doc }) => {
    await computedOnB(ws, a, b, doc);
    assert.deepEqual(await replicaFiles(ws), {});
    const [file] = snapshotFiles(b.saveDir);
    assert.notEqual(fs.statSync(path.join(b.saveDir, file)).ino, fs.statSync(path.join(a.saveDir, file)).ino,
      'b saved its own file under the same name');
  });
});

// llama-server writes a slot file in place (fopen "wb"): a name in the directory that is a hard
// link to another file (a replica's, or one a local user planted) would be written through. A
// name without a row is unlinked before the save, so the other file keeps its bytes.
test('llama: a save never writes through a link left under its file\'s name', { timeout: 300000 }, async () => {
  await withDocumentOnA('llama', '  replica_files: false\n', async ({ ws, a, b, doc }) => {
    const [file] = snapshotFiles(a.saveDir);
    const outside = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'warmslot-outside-')), 'other.bin');
    fs.writeFileSync(outside, 'not a slot file, and it stays so\n');
    fs.linkSync(outside, path.join(b.saveDir, file));
    try {
      await computedOnB(ws, a, b, doc);
      assert.equal(fs.readFileSync(outside, 'utf8'), 'not a slot file, and it stays so\n');
      const saved = fs.statSync(path.join(b.saveDir, file));
      assert.notEqual(saved.ino, fs.statSync(outside).ino, 'the save made a file of its own');
      assert.deepEqual(indexRows(b.saveDir).map((r) => r.split(' ')[1]), [file]);
      assert.equal(Number(indexRows(b.saveDir)[0].split(' ')[2]), saved.size);
    } finally {
      fs.rmSync(path.dirname(outside), { recursive: true, force: true });
    }
  });
});
