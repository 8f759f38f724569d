// deploy/systemd: the installer into a staging root (no systemd needed) and the unit's settings.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot, tempDir } from './lib/procs.mjs';
import { warmslotBin } from './lib/warmslot.mjs';

const installer = path.join(repoRoot, 'deploy/systemd/install.sh');
const install = (...args) => {
  const r = spawnSync('bash', [installer, ...args], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
};
const mode = (file) => (fs.statSync(file).mode & 0o777).toString(8);

test('install.sh installs, keeps config and key on a second run, and uninstalls', () => {
  const root = tempDir('install');
  const at = (p) => path.join(root, p);
  install('--root', root, '--binary', warmslotBin());
  assert.equal(mode(at('usr/local/bin/warmslot')), '755');
  assert.equal(mode(at('etc/warmslot/env')), '600');
  assert.equal(mode(at('etc/warmslot/warmslot.yaml')), '644');
  assert.ok(fs.existsSync(at('etc/warmslot/warmslot.schema.json')));
  // The unit as the Debian package ships it, with ExecStart pointing at /usr/local/bin.
  const unit = fs.readFileSync(path.join(repoRoot, 'deploy/systemd/warmslot.service'), 'utf8');
  const installed = fs.readFileSync(at('etc/systemd/system/warmslot.service'), 'utf8');
  assert.match(installed, /^ExecStart=\/usr\/local\/bin\/warmslot --config /m);
  assert.equal(installed, unit.replace('\nExecStart=/usr/bin/warmslot ', '\nExecStart=/usr/local/bin/warmslot '));

  // The installed config, with the installed key, passes the installed binary's check.
  const key = fs.readFileSync(at('etc/warmslot/env'), 'utf8').match(/^WARMSLOT_API_KEY=(\S+)$/m)[1];
  const check = spawnSync(at('usr/local/bin/warmslot'), ['check-config', at('etc/warmslot/warmslot.yaml')],
    { encoding: 'utf8', env: { ...process.env, WARMSLOT_API_KEY: key } });
  assert.equal(check.status, 0, check.stderr);
  // ...and the key is in use: without it the config does not start.
  const env = { ...process.env };
  delete env.WARMSLOT_API_KEY;
  const unkeyed = spawnSync(at('usr/local/bin/warmslot'), ['check-config', at('etc/warmslot/warmslot.yaml')],
    { encoding: 'utf8', env });
  assert.equal(unkeyed.status, 2);
  assert.match(unkeyed.stderr, /api_keys\[0\]: environment variable WARMSLOT_API_KEY is not set/);

  fs.appendFileSync(at('etc/warmslot/warmslot.yaml'), '# edited\n');
  install('--root', root, '--binary', warmslotBin());
  assert.match(fs.readFileSync(at('etc/warmslot/warmslot.yaml'), 'utf8'), /# edited\n$/);
  assert.equal(fs.readFileSync(at('etc/warmslot/env'), 'utf8').match(/^WARMSLOT_API_KEY=(\S+)$/m)[1], key);

  install('--root', root, '--uninstall');
  assert.ok(!fs.existsSync(at('usr/local/bin/warmslot')));
  assert.ok(!fs.existsSync(at('etc/systemd/system/warmslot.service')));
  assert.ok(fs.existsSync(at('etc/warmslot/warmslot.yaml')), 'uninstall keeps the config');
  install('--root', root, '--uninstall', '--purge');
  assert.ok(!fs.existsSync(at('etc/warmslot')));
  fs.rmSync(root, { recursive: true, force: true });
});

test('install.sh refuses a missing binary and unknown options', () => {
  const root = tempDir('install');
  const missing = spawnSync('bash', [installer, '--root', root, '--binary', path.join(root, 'nope')], { encoding: 'utf8' });
  assert.equal(missing.status, 1);
  assert.match(missing.stderr, /no warmslot binary/);
  assert.equal(spawnSync('bash', [installer, '--frobnicate'], { encoding: 'utf8' }).status, 2);
  fs.rmSync(root, { recursive: true, force: true });
});

test('the unit has the settings docs/service.md promises', () => {
  const unit = fs.readFileSync(path.join(repoRoot, 'deploy/systemd/warmslot.service'), 'utf8');
  const settings = new Map();
  for (const line of unit.split('\n')) {
    const m = line.match(/^([A-Za-z]+)=(.*)$/);
    if (m) settings.set(m[1], m[2]);
  }
  const expected = {
    Type: 'notify',
    ExecStart: '/usr/bin/warmslot --config /etc/warmslot/warmslot.yaml',
    ExecReload: '/bin/kill -HUP $MAINPID',
    DynamicUser: 'yes', StateDirectory: 'warmslot', ConfigurationDirectory: 'warmslot',
    ProtectSystem: 'strict', ProtectHome: 'yes', PrivateTmp: 'yes', NoNewPrivileges: 'yes',
    RestrictAddressFamilies: 'AF_INET AF_INET6 AF_UNIX', Restart: 'on-failure', KillMode: 'mixed',
  };
  for (const [key, value] of Object.entries(expected)) assert.equal(settings.get(key), value, key);
  // Longer than the default shutdown grace (from the schema) with room for the backends to exit.
  const seconds = (d) => Number(d.match(/^(\d+)(s|min)$/)[1]) * (d.endsWith('min') ? 60 : 1);
  const schema = JSON.parse(fs.readFileSync(path.join(repoRoot, 'config/warmslot.schema.json'), 'utf8'));
  const grace = schema.properties.timeouts.properties.shutdown_grace.default;
  assert.ok(seconds(settings.get('TimeoutStopSec')) >= 3 * seconds(grace));
  for (const absent of ['PrivateDevices', 'MemoryDenyWriteExecute']) assert.ok(!settings.has(absent), absent);
});
