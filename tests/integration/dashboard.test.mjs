// The dashboard page in headless Chromium against real llama-server and warmslot processes:
// two documents in their slots, a disk restore after a backend restart in the request list,
// charts with points, the page's own actions (warm a document, save now), API keys, and
// `warmslot status` printing the same picture. Screenshots go to $WARMSLOT_SCREENSHOT_DIR
// (docs/img refreshes the README's), else to a temporary directory.
//
// Chromium comes from Debian (`bash deploy/install-deps.sh --browser`), puppeteer-core from npm;
// WARMSLOT_SKIP_BROWSER=1 skips the test where no browser is installed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { getJson, postJson, restartLlama, startLlama } from './lib/llama.mjs';
import { repoRoot, sleep, tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot, warmslotBin } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const key = 'a-long-enough-dashboard-key';
const auth = { authorization: `Bearer ${key}` };
const settings = 'routing:\n  reconcile_interval: 100ms\ncache:\n  min_prefix_tokens: 1024\n';
const chromium = process.env.CHROMIUM ?? '/usr/bin/chromium';
const skip = process.env.WARMSLOT_SKIP_BROWSER === '1' && !fs.existsSync(chromium)
  ? 'WARMSLOT_SKIP_BROWSER=1 and no Chromium installed' : false;

async function launchBrowser() {
  assert.ok(fs.existsSync(chromium),
    `${chromium} is missing: run bash deploy/install-deps.sh --browser (or set WARMSLOT_SKIP_BROWSER=1)`);
  const { default: puppeteer } = await import('puppeteer-core');
  // Root needs --no-sandbox; the rest keeps Chromium off every network but loopback.
  return puppeteer.launch({
    executablePath: chromium, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--disable-default-apps', '--disable-extensions'],
  });
}

async function statusCli(args, env = {}) {
  try {
    const { stdout, stderr } = await promisify(execFile)(warmslotBin(), ['status', ...args],
      { env: { ...process.env, ...env } });
    return { code: 0, stdout, stderr };
  } catch (e) {
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const texts = (page, selector) => page.$$eval(selector, (els) => els.map((e) => e.textContent));

async function screenshot(page, name) {
  const dir = process.env.WARMSLOT_SCREENSHOT_DIR
    ? path.resolve(repoRoot, process.env.WARMSLOT_SCREENSHOT_DIR) : tempDir('screens');
  fs.mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: path.join(dir, name), fullPage: true });
}

const corrections = async (ws) =>
  Number((await (await fetch(`${ws.url}/metrics`, { headers: auth })).text())
    .match(/warmslot_belief_corrections_total (\d+)/)[1]);

test('the dashboard shows slots, disk, charts and requests; its actions work; keys are required',
  { timeout: 300000, skip }, async () => {
    let llama = await startLlama({ arch: 'llama', slots: 3, ctx: 16384 });
    const ws = await startWarmslot({ backends: [{ name: 'gpu0', url: llama.url, slotSaveDir: llama.saveDir }],
      extra: settings, apiKeys: [key] });
    let browser;
    try {
      browser = await launchBrowser();
      await waitFor('routing', async () => (await getJson(`${ws.url}/health`, { headers: auth })).body.backends?.[0]?.routing, 30000);
      const docs = [makeDocument(901, 6000), makeDocument(902, 6000)];
      for (const [i, d] of docs.entries()) {
        const r = await postJson(`${ws.url}/v1/chat/completions`, chat(d, `Question ${i}?`), auth);
        assert.equal(r.status, 200, JSON.stringify(r.body));
        assert.match(r.headers.get('x-warmslot-disk') ?? '', /^snapshot \d+ tokens$/);
      }
      // A client may name what it sends: the label stands for the prompt on the page.
      const labelled = await postJson(`${ws.url}/v1/chat/completions`,
        chat(docs[1], 'Another question?'), { ...auth, 'X-Warmslot-Label': 'pump manual, 2nd edition' });
      assert.equal(labelled.status, 200);

      // Without a key: the data is refused, the page asks for a key and shows nothing else.
      assert.equal((await getJson(`${ws.url}/warmslot/status`)).status, 401);
      const page = await browser.newPage();
      await page.setViewport({ width: 1280, height: 900 });
      const problems = [];
      page.on('pageerror', (e) => problems.push(e.message));
      page.on('requestfailed', (r) => problems.push(`${r.url()} ${r.failure()?.errorText}`));
      page.on('request', (r) => {
        if (!r.url().startsWith(ws.url)) problems.push(`request outside warmslot: ${r.url()}`);
      });
      await page.goto(`${ws.url}/warmslot/`);
      await page.waitForSelector('#key-form:not([hidden])', { timeout: 10000 });
      const shown = (selector) => page.$eval(selector, (e) => getComputedStyle(e).display !== 'none');
      assert.equal(await shown('#main'), false, 'nothing but the key form without a key');
      await page.type('#key', 'a-wrong-key-of-some-length');
      await page.click('#key-form button');
      await page.waitForFunction(() => document.querySelector('#key-error').textContent.includes('refused'), { timeout: 10000 });
      await screenshot(page, 'dashboard-key.png');
      await page.type('#key', key);
      await page.click('#key-form button');
      await page.waitForSelector('#main:not([hidden])', { timeout: 10000 });
      assert.equal(await shown('#key-form'), false);

      // Both documents in their slots: each slot row shows the start of what it holds.
      await page.waitForFunction((a, b) => {
        const cells = [...document.querySelectorAll('tr.slot td.preview')].map((c) => c.textContent);
        return cells.some((c) => c.startsWith(a)) && cells.some((c) => c.includes(b));
      }, { timeout: 10000 }, docs[0].slice(0, 20), 'label: pump manual, 2nd edition');
      const slots = await page.$$eval('tr.slot', (rows) => rows.map((r) => ({
        slot: r.dataset.slot, tokens: r.children[2].textContent, holds: r.querySelector('td.preview').textContent })));
      const first = slots.find((s) => s.holds.startsWith(docs[0].slice(0, 20)));
      const second = slots.find((s) => s.holds === 'label: pump manual, 2nd edition');
      assert.ok(first && second && first.slot !== second.slot, JSON.stringify(slots));
      assert.ok(Number(first.tokens.replace(/,/g, '')) > 1000, JSON.stringify(first));
      await page.waitForFunction(() => document.querySelectorAll('tr.disk-file').length === 2, { timeout: 10000 });
      await page.waitForFunction(() => Number(document.querySelector('#chart-tokens').dataset.points) >= 2, { timeout: 10000 });
      await screenshot(page, 'dashboard.png');

      // A restart empties the backend; the next question restores its prefix from disk.
      const before = await corrections(ws);
      llama = await restartLlama(llama);
      await waitFor('the restart to be noticed', async () => (await corrections(ws)) > before, 10000);
      const again = await postJson(`${ws.url}/v1/chat/completions`, chat(docs[0], 'After the restart?'), auth);
      assert.match(again.headers.get('x-warmslot-disk') ?? '', /^restored \d+ tokens$/);
      await page.waitForFunction(() => [...document.querySelectorAll('tr.request td.disk')]
        .some((c) => /^restored \d+ tokens$/.test(c.textContent)), { timeout: 10000 });
      await page.select('#route-filter', 'disk');
      const diskRows = await texts(page, 'tr.request td.disk');
      assert.ok(diskRows.length >= 3 && diskRows.every((t) => t !== '-'), JSON.stringify(diskRows));
      await page.select('#route-filter', '');

      // Charts: the token chart has points for processed and reused tokens.
      await page.waitForFunction(() => Number(document.querySelector('#chart-tokens').dataset.points) >= 2, { timeout: 10000 });
      assert.ok((await page.$$('#chart-tokens circle.pt')).length >= 2);
      assert.ok((await page.$$('#chart-routes circle.pt')).length >= 2);

      // Actions: warm a third document from a file, then save now.
      const file = path.join(tempDir('upload'), 'manual.txt');
      fs.writeFileSync(file, makeDocument(903, 5000));
      await (await page.$('#warm-files')).uploadFile(file);
      await page.click('#warm-form button');
      await page.waitForFunction(() => /^(saved \d+ tokens|not saved|failed)/.test(
        document.querySelector('#warm-result').textContent), { timeout: 120000 });
      assert.match(await page.$eval('#warm-result', (e) => e.textContent), /^saved \d+ tokens on gpu0 slot \d$/);
      await page.click('#snapshot');
      await page.waitForFunction(() => /^(saved|failed)/.test(document.querySelector('#snapshot-result').textContent), { timeout: 60000 });
      assert.match(await page.$eval('#snapshot-result', (e) => e.textContent), /^saved \d+, skipped \d+$/);
      await page.waitForFunction(() => document.querySelectorAll('tr.disk-file').length === 3, { timeout: 10000 });
      await screenshot(page, 'dashboard-restore.png');
      assert.deepEqual(problems, []);
      await page.close();

      // The same picture in the terminal.
      const noKey = await statusCli(['--url', ws.url]);
      assert.equal(noKey.code, 1);
      assert.match(noKey.stderr, /401: missing or invalid API key/);
      const cli = await statusCli(['--url', ws.url, '--api-key-env', 'DASH_KEY'], { DASH_KEY: key });
      assert.equal(cli.code, 0, cli.stderr);
      assert.match(cli.stdout, /^gpu0 +ok +on +3 /m);
      assert.ok(cli.stdout.includes(docs[0].slice(0, 20)), cli.stdout);
      assert.match(cli.stdout, /restored \d+ tokens/);
      assert.match(cli.stdout, /ws-[0-9a-f]+\.bin/);
    } finally {
      await browser?.close();
      await ws.stop();
      await llama.stop();
    }
  });

test('dashboard.previews false keeps no prompt text; dashboard.enabled false serves nothing',
  { timeout: 120000 }, async () => {
    const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
    const running = [];
    const start = async (extra) => {
      const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], extra });
      running.push(ws);
      return ws;
    };
    try {
      const ws = await start('routing:\n  reconcile_interval: 100ms\ndashboard:\n  previews: false\n');
      await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
      const doc = makeDocument(904, 3000);
      assert.equal((await postJson(`${ws.url}/v1/chat/completions`, chat(doc, 'Q?'))).status, 200);
      const s = await getJson(`${ws.url}/warmslot/status`);
      assert.equal(s.status, 200);
      assert.equal(s.body.previews, false);
      assert.ok(s.body.backends[0].slots.some((sl) => sl.tokens > 500), JSON.stringify(s.body.backends));
      assert.ok(!JSON.stringify(s.body).includes(doc.slice(0, 20)), 'no prompt text in the status');
      assert.equal(s.body.requests[0].route.split(';')[0], 'miss');
      const off = await start('dashboard:\n  enabled: false\n');
      assert.equal((await getJson(`${off.url}/warmslot/status`)).status, 404);
      assert.equal((await getJson(`${off.url}/warmslot/`)).status, 404);
    } finally {
      for (const ws of running) await ws.stop();
      await llama.stop();
    }
  });

// Status is polled by dashboards and scripts; its disk panel comes from the indexes, whose reads
// share one thread with the requests' own index work. Polls of an unchanged tier read nothing,
// many at once cause at most one read, and a change is seen at the next poll.
test('status reads the disk indexes once for many polls, and again after a change', { timeout: 180000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: settings });
  const reads = async () => Number((await (await fetch(`${ws.url}/metrics`)).text())
    .match(/^warmslot_disk_listings_total (\d+)/m)[1]);
  const files = async () => {
    const s = await getJson(`${ws.url}/warmslot/status`);
    assert.equal(s.status, 200);
    return s.body.disk.dirs.flatMap((d) => d.files.map((f) => f.key));
  };
  try {
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    assert.equal((await postJson(`${ws.url}/v1/chat/completions`, chat(makeDocument(905, 6000), 'Q?'))).status, 200);
    const first = await files();
    assert.ok(first.length >= 1, `a file saved for the document: ${JSON.stringify(first)}`);
    // Settled (a save after the answer would change the index once more): then many polls.
    await waitFor('the tier settled', async () => {
      const before = await reads();
      await files();
      return (await reads()) === before;
    }, 30000);
    const before = await reads();
    await Promise.all(Array.from({ length: 40 }, () => files()));
    for (let i = 0; i < 20; ++i) await files();
    const polled = (await reads()) - before;
    assert.equal(polled, 0, `60 polls of an unchanged tier read the indexes ${polled} times`);
    // Another document's file: the next poll reads again and lists it.
    assert.equal((await postJson(`${ws.url}/v1/chat/completions`, chat(makeDocument(906, 6000), 'Q?'))).status, 200);
    const after = await files();
    assert.ok(after.length > first.length, `the new file is listed: ${JSON.stringify(after)} (before ${JSON.stringify(first)})`);
    assert.ok((await reads()) > before, 'the change was read');
  } finally {
    await ws.stop();
    await llama.stop();
  }
});

// What a slot does now: the page shows a long priming rise (tokens done of the prefix, from
// llama-server's own count) while `POST /admin/warm` reads a document, as `warmslot status` does.
test('the dashboard shows a slot\'s priming rise while a document is warmed', { timeout: 300000, skip }, async (t) => {
  const llama = await startLlama({ arch: 'llama', slots: 1, ctx: 49152 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url, slotSaveDir: llama.saveDir }],
    extra: settings });
  let browser;
  try {
    browser = await launchBrowser();
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    const page = await browser.newPage();
    const problems = [];
    page.on('pageerror', (e) => problems.push(e.message));
    await page.goto(`${ws.url}/warmslot/`);
    await page.waitForSelector('tr.slot td.now', { timeout: 10000 });
    let finished = false;
    const warm = fetch(`${ws.url}/admin/warm`, { method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', system: makeDocument(907, 40000) }) })
      .then(async (r) => ({ status: r.status, body: await r.text() }))
      .finally(() => { finished = true; });
    const seen = [];
    let cli = '';
    for (let i = 0; i < 1200 && !finished; ++i) {  // at most 120 s
      const now = (await page.$eval('tr.slot td.now', (e) => e.textContent)).trim();
      if (seen.at(-1) !== now) seen.push(now);
      if (!cli && /^priming/.test(now)) cli = (await statusCli(['--url', ws.url])).stdout;
      await sleep(100);
    }
    const w = await warm;
    assert.equal(w.status, 200, w.body);
    t.diagnostic(`the page's "now" for slot 0: ${JSON.stringify(seen)}`);
    const done = seen.map((t) => t.match(/^priming ([\d,]+) \/ ([\d,]+) tokens, \d+ s$/))
      .filter(Boolean).map((m) => Number(m[1].replace(/,/g, '')));
    assert.ok(done.length >= 2 && done.at(-1) > done[0], `the priming's progress on the page: ${JSON.stringify(seen)}`);
    assert.match(cli, /b\/0 .*(priming \d+\/\d+|saving \d+) \d+s/, cli);
    assert.deepEqual(problems, []);
    await screenshot(page, 'dashboard-priming.png');
  } finally {
    if (browser) await browser.close();
    await ws.stop();
    await llama.stop();
  }
});
