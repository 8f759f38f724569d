// Pins the llama-server behaviours warmslot is built on (see ../../docs/llama-server-behaviour.md).
// If a llama.cpp upgrade changes one, this fails and names the behaviour.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { measure } from './lib/ground-truth.mjs';

for (const arch of ['llama', 'qwen35']) {
  test(`llama-server ground truth on ${arch}`, { timeout: 600000 }, async () => {
    const rows = await measure(arch);
    const failed = rows.filter((r) => !r.ok);
    assert.deepEqual(failed, [], `behaviours changed:\n${JSON.stringify(failed, null, 2)}`);
    assert.equal(rows.length, 7);
  });
}
