// The warmslot command line: check-config on the shipped example and on broken files.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot, tempDir } from './lib/procs.mjs';
import { warmslotBin } from './lib/warmslot.mjs';

const run = (args, env = {}) => spawnSync(warmslotBin(), args, { encoding: 'utf8', env: { ...process.env, ...env } });

test('the example config is valid as installed; with its key line uncommented it needs the key', () => {
  const example = path.join(repoRoot, 'config/warmslot.example.yaml');
  const plain = run(['check-config', example], { WARMSLOT_API_KEY: '' });
  assert.equal(plain.status, 0, plain.stderr);
  assert.match(plain.stdout, /: ok \(2 backends\)/);
  const text = fs.readFileSync(example, 'utf8');
  const keyedText = text.replace('  # - ${WARMSLOT_API_KEY}\n', '  - ${WARMSLOT_API_KEY}\n');
  assert.notEqual(keyedText, text, 'the example has a commented WARMSLOT_API_KEY line');
  const dir = tempDir('cli');
  const keyed = path.join(dir, 'keyed.yaml');
  fs.writeFileSync(keyed, keyedText);
  const ok = run(['check-config', keyed], { WARMSLOT_API_KEY: 'a-long-enough-key' });
  assert.equal(ok.status, 0, ok.stderr);
  const missing = run(['check-config', keyed], { WARMSLOT_API_KEY: '' });
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /api_keys\[0\]: environment variable WARMSLOT_API_KEY/);
  assert.doesNotMatch(missing.stderr, /a-long-enough-key/);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('a bad config names file, line and key', () => {
  const dir = tempDir('cli');
  const file = path.join(dir, 'bad.yaml');
  fs.writeFileSync(file, 'backends:\n  - name: a\n    url: http://127.0.0.1:1\nlimits:\n  max_body: 1MiB\n');
  const r = run(['check-config', file]);
  assert.equal(r.status, 2);
  assert.match(r.stderr, new RegExp(`${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}:5: limits.max_body: unknown key`));
  const started = run(['--config', file]);
  assert.equal(started.status, 2, 'the server refuses to start on a bad config');
  fs.rmSync(dir, { recursive: true, force: true });
});

test('--version and usage', () => {
  assert.match(run(['--version']).stdout, /^warmslot \d+\.\d+\.\d+/);
  assert.equal(run([]).status, 2);
});
