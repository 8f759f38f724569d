// Pins the llama-server behaviours warmslot is built on (see ../../docs/llama-server-behaviour.md),
// on every llama.cpp version the tests know (tests/llama/pins). If a llama.cpp upgrade changes
// one, this fails and names the behaviour and the version.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { measure } from './lib/ground-truth.mjs';
import { llamaPins } from './lib/llama.mjs';

for (const pin of llamaPins) {
  for (const arch of ['llama', 'qwen35']) {
    test(`llama-server ground truth on ${arch}, ${pin}`, { timeout: 600000 }, async () => {
      const rows = await measure(arch, { pin });
      const failed = rows.filter((r) => !r.ok);
      assert.deepEqual(failed, [], `behaviours changed:\n${JSON.stringify(failed, null, 2)}`);
      assert.equal(rows.length, 7);
    });
  }
}
