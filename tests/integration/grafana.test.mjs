// deploy/grafana/warmslot.json names only what warmslot's /metrics exports: every metric and
// label in every panel's query, and every route value it selects, as a live warmslot in front of
// a real llama-server writes them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { getJson, postJson, startLlama } from './lib/llama.mjs';
import { repoRoot, waitFor } from './lib/procs.mjs';
import { startWarmslot } from './lib/warmslot.mjs';
import { chat, makeDocument } from './lib/text.mjs';

const board = JSON.parse(fs.readFileSync(path.join(repoRoot, 'deploy/grafana/warmslot.json'), 'utf8'));

// name -> { labels: Set, values: { label: Set } } from the Prometheus text format.
function exported(text) {
  const metrics = new Map();
  for (const line of text.split('\n')) {
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? /);
    if (!m) continue;
    const entry = metrics.get(m[1]) ?? { labels: new Set(), values: {} };
    for (const [, label, value] of (m[2] ?? '').matchAll(/([a-zA-Z_]+)="([^"]*)"/g)) {
      entry.labels.add(label);
      (entry.values[label] ??= new Set()).add(value);
    }
    metrics.set(m[1], entry);
  }
  return metrics;
}

// Every query of the board: panel targets and template variables.
function queries() {
  const out = board.panels.flatMap((p) => p.targets.map((t) => ({ where: p.title, expr: t.expr })));
  for (const v of board.templating.list) {
    if (v.type === 'query') out.push({ where: `variable ${v.name}`, expr: v.definition });
  }
  return out;
}

// Labels Prometheus adds itself when it scrapes, and Grafana's own variables.
const scrapeLabels = new Set(['instance', 'job']);

test('every query of the Grafana board names metrics, labels and routes that /metrics exports', { timeout: 120000 }, async () => {
  const llama = await startLlama({ arch: 'llama', slots: 2, ctx: 8192 });
  const ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }],
    extra: 'routing:\n  reconcile_interval: 100ms\n' });
  try {
    await waitFor('routing', async () => (await getJson(`${ws.url}/health`)).body.backends?.[0]?.routing, 30000);
    assert.equal((await postJson(`${ws.url}/v1/chat/completions`, chat(makeDocument(950, 3000), 'Q?'))).status, 200);
    const metrics = exported(await (await fetch(`${ws.url}/metrics`)).text());
    assert.ok(metrics.size >= 6, [...metrics.keys()].join(', '));

    const qs = queries();
    assert.ok(qs.length >= 8);
    const used = new Set();
    for (const { where, expr } of qs) {
      const names = [...expr.matchAll(/\b(warmslot_[a-z_]+)\b/g)].map((m) => m[1]);
      assert.ok(names.length > 0, `${where}: ${expr} names no warmslot metric`);
      for (const name of names) {
        assert.ok(metrics.has(name), `${where}: ${name} is not exported`);
        used.add(name);
        const m = metrics.get(name);
        // Selectors {label op "value"} right after the metric name.
        const selector = expr.slice(expr.indexOf(name) + name.length).match(/^\{([^}]*)\}/)?.[1] ?? '';
        for (const [, label, op, value] of selector.matchAll(/([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"/g)) {
          if (scrapeLabels.has(label)) continue;
          assert.ok(m.labels.has(label), `${where}: ${name} has no label ${label}`);
          if (op === '=~' || op === '=') {
            for (const v of value.split('|')) assert.ok(m.values[label].has(v), `${where}: ${label}="${v}" never exported`);
          }
        }
      }
      for (const [, labels] of expr.matchAll(/\bby \(([^)]*)\)/g)) {
        for (const label of labels.split(',').map((l) => l.trim())) {
          assert.ok(names.some((n) => metrics.get(n).labels.has(label)), `${where}: no metric has label ${label}`);
        }
      }
    }
    // The board shows every counter warmslot exports.
    assert.deepEqual([...metrics.keys()].filter((n) => n.startsWith('warmslot_') && !used.has(n)), []);
    for (const p of board.panels) assert.ok(p.description?.length > 20, `panel ${p.title} has no description`);
  } finally {
    await ws.stop();
    await llama.stop();
  }
});
