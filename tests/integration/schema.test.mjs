// config/warmslot.schema.json and `warmslot check-config` judge configs alike: a table of
// configs gets the same verdict from both, the example passes both, and the schema, the parser,
// docs/config.md and the example name the same keys.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import Ajv from 'ajv';
import YAML from 'yaml';
import { repoRoot, tempDir } from './lib/procs.mjs';
import { warmslotBin } from './lib/warmslot.mjs';

const schema = JSON.parse(fs.readFileSync(path.join(repoRoot, 'config/warmslot.schema.json'), 'utf8'));
// strictTuples off: `command` is an open tuple (the program, then any arguments), which Ajv's
// strict mode flags as a likely mistake.
const validate = new Ajv({ allErrors: true, allowUnionTypes: true, strictTuples: false }).compile(schema);
const dir = tempDir('schema');
const env = { ...process.env, HOME: dir, WARMSLOT_TEST_KEY: 'a-long-enough-key' };
delete env.STATE_DIRECTORY;
delete env.XDG_CACHE_HOME;

function schemaAccepts(text) {
  let doc;
  try {
    doc = YAML.parse(text); // duplicate keys and syntax errors throw, as in check-config
  } catch {
    return false;
  }
  return validate(doc);
}

let files = 0;
function checkConfig(text) {
  const file = path.join(dir, `case-${++files}.yaml`);
  fs.writeFileSync(file, text);
  const r = spawnSync(warmslotBin(), ['check-config', file], { encoding: 'utf8', env });
  assert.ok(r.status === 0 || r.status === 2, `check-config crashed: ${r.status} ${r.stderr}`);
  return { ok: r.status === 0, stderr: r.stderr };
}

const url = 'backends:\n  - name: a\n    url: http://127.0.0.1:8081\n';
const cmd = (extra = '') => `backends:\n  - name: a\n    command: [llama-server, -m, /m.gguf]\n${extra}`;
// A config whose rewrite.default block, or the block of model m, holds `yaml`.
const rules = (yaml) => `${url}rewrite:\n  default:\n${yaml.replace(/^(?=.)/gm, '    ')}`;
const modelRules = (yaml) => `${url}rewrite:\n  models:\n    m:\n${yaml.replace(/^(?=.)/gm, '      ')}`;

// [what, yaml, valid]
const cases = [
  ['minimal url backend', url, true],
  ['minimal command backend', cmd(), true],
  ['every section empty', `${url}api_keys:\nhttp:\nlimits:\ntimeouts:\nrouting:\ncache:\nrewrite:\nlog:\ndashboard:\ntenants:\n`, true],
  ['tenant limits', `${url}tenants:\n  limits:\n    concurrent_requests: 4\n    swaps_per_minute: 6\n`, true],
  ['tenant limits empty', `${url}tenants:\n  limits:\n`, true],
  ['tenant limit negative', `${url}tenants:\n  limits:\n    concurrent_requests: -1\n`, false],
  ['tenant limit not a number', `${url}tenants:\n  limits:\n    swaps_per_minute: many\n`, false],
  ['stalled reader', `${url}limits:\n  stalled_reader: 5s\n`, true],
  ['stalled reader of 0', `${url}limits:\n  stalled_reader: 0s\n`, false],
  ['every rewrite block empty', `${rules('volatile_lines:\ndocuments:\n')}  models:\n    m:\n`, true],
  ['every rewrite key', `${url}rewrite:
  memory: 1TiB
  default:
    system_messages: front
    volatile_lines: {presets: [date, time, iso_timestamp, uuid, request_id], patterns: ['^Now: .*$']}
    documents:
      min_bytes: 64B
      delimiters:
        - {begin: '<document[^>]*>', end: '</document>'}
        - begin: '^=== '
          end: '^=== end'
      order: true
      edits: append
      edit_similarity: 1
      edit_id: '<document id="([^"]+)"'
      max_note_bytes: 1MiB
  models:
    qwen3-8b:
      system_messages: keep
      documents: {edits: reprocess, edit_similarity: 0.1, delimiters: []}
    "any name: even/this one":
      volatile_lines: {presets: []}
`, true],
  ['every key', `listen: "[::1]:0"
backends:
  - name: gpu-0.main_1
    url: http://llama.internal:9000/
    models: [qwen3-8b]
    slot_save_path: /srv/slots
  - name: b
    command: [/opt/llama-server, -np, 4, --ctx-size, "8192"]
    start: on_demand
    idle_stop: 0s
    start_timeout: 2m
    restart_backoff_max: 1.5 s
api_keys: ["\${WARMSLOT_TEST_KEY}", literal-key-1]
limits: {max_header_bytes: 32KiB, max_header_count: 500, max_body_bytes: 1.5GB, max_connections: 100000}
timeouts: {header_read: 250ms, body_read: 30s, connect: 1s, upstream_response: 2h,
           stream_idle: 5m, stream_keepalive: 2s, client_idle: 24h, shutdown_grace: 1ms}
routing: {enabled: false, short_request_tokens: 0, long_segment_tokens: 1, scratch_slot: true,
          scratch_min_slots: 4096, max_wait: 30s, reconcile_interval: 250ms}
cache: {enabled: true, dir: /var/lib/warmslot, max_disk: 1073741824, min_prefix_tokens: 1,
        snapshot_after_uses: 3, slot_call_timeout: 30s, replica_files: false}
log: {level: trace, access: false}
dashboard: {enabled: false, previews: false}
`, true],
  ['listen on all interfaces', `listen: 0.0.0.0:8080\n${url}`, true],
  ['size as a plain number', `${url}limits:\n  max_body_bytes: 4096\n`, true],
  ['TRUE is a boolean', `${url}log:\n  access: TRUE\n`, true],

  ['empty file', '', false],
  ['no backends', 'listen: 127.0.0.1:8080\n', false],
  ['empty backend list', 'backends: []\n', false],
  ['unknown top-level key', `${url}verbose: true\n`, false],
  ['unknown backend key', `${url}    weight: 2\n`, false],
  ['unknown section key', `${url}limits:\n  max_body: 1MiB\n`, false],
  ['unknown key in cache', `${url}cache:\n  directory: /x\n`, false],
  ['duplicate key', `${url}log:\n  level: info\n  level: debug\n`, false],
  ['YAML syntax error', `${url}log: [\n`, false],
  ['url and command', `${url}    command: [llama-server]\n`, false],
  ['neither url nor command', 'backends:\n  - name: a\n    models: [m]\n', false],
  ['no name', 'backends:\n  - url: http://h:1\n', false],
  ['name with a slash', 'backends:\n  - name: a/b\n    url: http://h:1\n', false],
  ['name ..', 'backends:\n  - name: ".."\n    url: http://h:1\n', false],
  ['https url', 'backends:\n  - name: a\n    url: https://h:1\n', false],
  ['url with a path', 'backends:\n  - name: a\n    url: http://h:1/v1\n', false],
  ['url port 0', 'backends:\n  - name: a\n    url: http://h:0\n', false],
  ['url port 65536', 'backends:\n  - name: a\n    url: http://h:65536\n', false],
  ['url with user info', 'backends:\n  - name: a\n    url: http://u:p@h:1\n', false],
  ['command as one string', 'backends:\n  - name: a\n    command: llama-server -m x\n', false],
  ['command line in one item', 'backends:\n  - name: a\n    command: ["llama-server -m x"]\n', false],
  ['empty command', 'backends:\n  - name: a\n    command: []\n', false],
  ['command with --port', cmd().replace('/m.gguf]', '/m.gguf, --port, "9"]'), false],
  ['command with --host=', cmd().replace('/m.gguf]', '/m.gguf, --host=0.0.0.0]'), false],
  ['command with --slot-save-path', cmd().replace('/m.gguf]', '/m.gguf, --slot-save-path, /x]'), false],
  ['start on a url backend', `${url}    start: on_demand\n`, false],
  ['idle_stop on a url backend', `${url}    idle_stop: 5m\n`, false],
  ['ctx_checkpoints on a url backend', `${url}    ctx_checkpoints: 0\n`, true],
  ['ctx_checkpoints on a command backend', cmd('    ctx_checkpoints: 0\n'), false],
  ['negative ctx_checkpoints', `${url}    ctx_checkpoints: -1\n`, false],
  ['bad start value', cmd('    start: lazy\n'), false],
  ['relative slot_save_path', `${url}    slot_save_path: slots\n`, false],
  ['relative cache.dir', `${url}cache:\n  dir: state\n`, false],
  ['listen with a host name', `listen: example.com:8080\n${url}`, false],
  ['listen without a port', `listen: 127.0.0.1\n${url}`, false],
  ['listen with an unbracketed IPv6', `listen: "::1:8080"\n${url}`, false],
  ['size without a number', `${url}limits:\n  max_body_bytes: MiB\n`, false],
  ['size with a bad unit', `${url}limits:\n  max_body_bytes: 64mb\n`, false],
  ['negative size', `${url}cache:\n  max_disk: -1GiB\n`, false],
  ['duration without a unit', `${url}timeouts:\n  connect: 10\n`, false],
  ['duration with a bad unit', `${url}timeouts:\n  connect: 10sec\n`, false],
  ['zero timeout', `${url}timeouts:\n  connect: 0s\n`, false],
  ['zero start_timeout', cmd('    start_timeout: 0ms\n'), false],
  ['bad log level', `${url}log:\n  level: verbose\n`, false],
  ['yes is not a boolean', `${url}log:\n  access: yes\n`, false],
  ['previews is a boolean', `${url}dashboard:\n  previews: 'no'\n`, false],
  ['count out of range', `${url}limits:\n  max_connections: 0\n`, false],
  ['header count out of range', `${url}limits:\n  max_header_count: 7\n`, false],
  ['scratch_min_slots 1', `${url}routing:\n  scratch_min_slots: 1\n`, false],
  ['count with a unit', `${url}routing:\n  long_segment_tokens: 1k\n`, false],
  ['section as a list', `${url}limits: [1]\n`, false],
  ['short literal key', `${url}api_keys: [short]\n`, false],
  ['malformed key reference', `${url}api_keys: ["\${A B}"]\n`, false],
  ['key with a space', `${url}api_keys: ["has a space"]\n`, false],
  ['same key twice', `${url}api_keys: [literal-key-1, literal-key-1]\n`, false],
  ['keys with roles and tenants', `${url}api_keys:\n  - literal-key-1\n  - {key: literal-key-2, role: client, tenant: team-a}\n  - {key: "\${WARMSLOT_TEST_KEY}", role: observer}\n`, true],
  ['unknown role', `${url}api_keys:\n  - {key: literal-key-2, role: root}\n`, false],
  ['tenant with a space', `${url}api_keys:\n  - {key: literal-key-2, tenant: "a b"}\n`, false],
  ['key map without its key', `${url}api_keys:\n  - {role: client}\n`, false],
  ['short key in a map', `${url}api_keys:\n  - {key: short}\n`, false],
  ['tenant disk budgets', `${url}api_keys:\n  - {key: literal-key-2, tenant: team-a}\ncache:\n  tenant_max_disk:\n    team-a: 20GiB\n    "*": 5GiB\n`, true],
  ['tenant disk budget with a bad name', `${url}cache:\n  tenant_max_disk:\n    "a b": 5GiB\n`, false],
  ['tenant disk budgets as a size', `${url}cache:\n  tenant_max_disk: 5GiB\n`, false],
  ['http settings', `${url}http:\n  allowed_hosts: [warmslot.lan, "*"]\n  cors_origins: ["https://app.example", "http://localhost:3000"]\n`, true],
  ['origin with a path', `${url}http:\n  cors_origins: ["https://app.example/x"]\n`, false],
  ['origin without a scheme', `${url}http:\n  cors_origins: [app.example]\n`, false],
  ['empty host name', `${url}http:\n  allowed_hosts: [""]\n`, false],
  ['two documents', `${url}---\n${url}`, false],
  ['unknown key in rewrite', `${url}rewrite:\n  rules: {}\n`, false],
  ['unknown key in a rules block', rules('volatile: {}\n'), false],
  ['unknown key in a model\'s documents', modelRules('documents:\n  min_size: 4KiB\n'), false],
  ['unknown key in a delimiter', rules('documents:\n  delimiters: [{begin: a, end: b, x: c}]\n'), false],
  ['rewrite models as a list', `${url}rewrite:\n  models: [m]\n`, false],
  ['bad edits value', rules('documents:\n  edits: replace\n'), false],
  ['preset name in capitals', rules('volatile_lines:\n  presets: [Date]\n'), false],
  ['unknown preset', rules('volatile_lines:\n  presets: [weekday]\n'), false],
  ['presets as one string', rules('volatile_lines:\n  presets: date\n'), false],
  ['empty volatile pattern', rules('volatile_lines:\n  patterns: [""]\n'), false],
  ['delimiter without end', rules('documents:\n  delimiters: [{begin: a}]\n'), false],
  ['delimiters with nothing', rules('documents:\n  delimiters:\n'), false],
  ['edit_id without a group', rules('documents:\n  edit_id: "id-[0-9]+"\n'), false],
  ['edit_id with only a non-capturing group', rules('documents:\n  edit_id: "(?:id)-[0-9]+"\n'), false],
  ['edit_similarity 0', rules('documents:\n  edit_similarity: 0\n'), false],
  ['edit_similarity over 1', rules('documents:\n  edit_similarity: 1.5\n'), false],
  ['order yes', rules('documents:\n  order: yes\n'), false],
  ['rewrite memory with a bad unit', `${url}rewrite:\n  memory: 64mb\n`, false],
  ['negative min_bytes', rules('documents:\n  min_bytes: -1KiB\n'), false],
];

for (const [what, text, valid] of cases) {
  test(`${valid ? 'valid' : 'invalid'}: ${what}`, () => {
    assert.equal(schemaAccepts(text), valid, `schema verdict; errors: ${JSON.stringify(validate.errors)}`);
    const r = checkConfig(text);
    assert.equal(r.ok, valid, `check-config verdict: ${r.stderr}`);
  });
}

// Rules only check-config can apply (they need the environment, several items at once or
// arithmetic on units). The schema accepts these; check-config must keep rejecting them.
const parserOnly = [
  ['unset key variable', `${url}api_keys: ["\${WARMSLOT_UNSET_VARIABLE}"]\n`],
  ['duplicate backend names', `${url}  - name: a\n    url: http://h:2\n`],
  ['names differing in case', `${url}  - name: A\n    url: http://h:2\n`],
  ['size below its range', `${url}limits:\n  max_header_bytes: 512\n`],
  ['fraction of a byte', `${url}limits:\n  max_body_bytes: 0.1KiB\n`],
  ['timeout over 24h', `${url}timeouts:\n  connect: 25h\n`],
  ['rewrite memory below its range', `${url}rewrite:\n  memory: 1KiB\n`],
  ['min_bytes below its range', rules('documents:\n  min_bytes: 32\n')],
  ['max_note_bytes above its range', rules('documents:\n  max_note_bytes: 2MiB\n')],
  ['invalid regex', rules('volatile_lines:\n  patterns: ["("]\n')],
  ['tenant disk budget of a tenant no key has', `${url}cache:\n  tenant_max_disk:\n    team-z: 5GiB\n`],
  ['tenant disk budget over max_disk', `${url}api_keys:\n  - {key: literal-key-2, tenant: t}\ncache:\n  max_disk: 1GiB\n  tenant_max_disk: {t: 2GiB}\n`],
  ['edit_id with only escaped parentheses', rules("documents:\n  edit_id: '\\(id\\)'\n")],
];
for (const [what, text] of parserOnly) {
  test(`only check-config rejects: ${what}`, () => {
    assert.equal(schemaAccepts(text), true, JSON.stringify(validate.errors));
    assert.equal(checkConfig(text).ok, false);
  });
}

test('the example config passes both', () => {
  const text = fs.readFileSync(path.join(repoRoot, 'config/warmslot.example.yaml'), 'utf8');
  assert.match(text.split('\n')[0], /^# yaml-language-server: \$schema=\.\/warmslot\.schema\.json$/);
  assert.ok(schemaAccepts(text), JSON.stringify(validate.errors));
  const r = spawnSync(warmslotBin(), ['check-config', path.join(repoRoot, 'config/warmslot.example.yaml')],
    { encoding: 'utf8', env: { ...env, WARMSLOT_API_KEY: 'a-long-enough-key' } });
  assert.equal(r.status, 0, r.stderr);
});

// Where each map of keys lives in the config and in the schema.
const maps = {
  '': schema,
  'backends[0]': schema.properties.backends.items,
  'swap_groups[0]': schema.properties.swap_groups.items,
  limits: schema.properties.limits,
  timeouts: schema.properties.timeouts,
  routing: schema.properties.routing,
  cache: schema.properties.cache,
  rewrite: schema.properties.rewrite,
  log: schema.properties.log,
  dashboard: schema.properties.dashboard,
  http: schema.properties.http,
  tenants: schema.properties.tenants,
};
// Maps below those, each with a config that puts an unknown key there.
const rulesBlock = schema.definitions.rewrite_rules;
const nested = {
  'api_keys[0]': [schema.properties.api_keys.items.anyOf[1], `${url}api_keys:\n  - {key: long-enough-key-1, zz_unknown: 1}\n`],
  'rewrite.default': [rulesBlock, rules('zz_unknown: 1\n')],
  'rewrite.models["m"]': [rulesBlock, modelRules('zz_unknown: 1\n')],
  'rewrite.default.volatile_lines': [rulesBlock.properties.volatile_lines,
    rules('volatile_lines:\n  zz_unknown: 1\n')],
  'rewrite.models["m"].documents': [rulesBlock.properties.documents, modelRules('documents:\n  zz_unknown: 1\n')],
  'rewrite.default.documents.delimiters[0]': [rulesBlock.properties.documents.properties.delimiters.items,
    rules('documents:\n  delimiters: [{begin: a, end: b, zz_unknown: 1}]\n')],
  'tenants.limits': [schema.properties.tenants.properties.limits, `${url}tenants:\n  limits:\n    zz_unknown: 1\n`],
};
const keysOf = (node) => Object.keys(node.properties).sort();

test('the parser and the schema know the same keys at every level', () => {
  for (const [where, node] of Object.entries(maps)) {
    let text;
    if (where === '') text = `${url}zz_unknown: 1\n`;
    else if (where === 'backends[0]') text = `${url}    zz_unknown: 1\n`;
    else if (where === 'swap_groups[0]') text = `${url}swap_groups:\n  - zz_unknown: 1\n`;
    else text = `${url}${where}:\n  zz_unknown: 1\n`;
    const r = checkConfig(text);
    const listed = r.stderr.match(/unknown key; expected one of: (.*)$/m);
    assert.ok(listed, `no key list for ${where}: ${r.stderr}`);
    assert.deepEqual(listed[1].split(', ').sort(), keysOf(node), `keys of ${where || 'the top level'}`);
  }
  for (const [where, [node, text]] of Object.entries(nested)) {
    const r = checkConfig(text);
    const listed = r.stderr.match(/: ([^:]*)\.zz_unknown: unknown key; expected one of: (.*)$/m);
    assert.ok(listed, `no key list for ${where}: ${r.stderr}`);
    assert.equal(listed[1], where);
    assert.deepEqual(listed[2].split(', ').sort(), keysOf(node), `keys of ${where}`);
  }
});

test('docs/config.md documents every key of the schema, and no other', () => {
  const docs = fs.readFileSync(path.join(repoRoot, 'docs/config.md'), 'utf8');
  const sections = docs.split(/^### /m).slice(1);
  const documented = {};
  // The rewrite section's rules block has a table of its own, after "A rules block:".
  const ownTable = (s) => s.split('A rules block:')[0];
  for (const s of sections) {
    const name = s.match(/^`([a-z_]+)`/)?.[1];
    if (!name) continue;
    documented[name] = [...ownTable(s).matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]).sort();
  }
  assert.deepEqual(Object.keys(documented).sort(), keysOf(schema));
  for (const [section, keys] of Object.entries(documented)) {
    const node = ['backends', 'swap_groups'].includes(section) ? maps[`${section}[0]`]
      : schema.properties[section];
    assert.deepEqual(keys, node.properties ? keysOf(node) : [], `docs/config.md, section ${section}`);
  }
  // The rules block is one table in the rewrite section: `key` rows for its plain keys and
  // `block.key` rows for the keys of its blocks.
  const rewrite = sections.find((s) => s.startsWith('`rewrite`')).split('A rules block:')[1];
  const rows = [...rewrite.matchAll(/^\| `([a-z_]+)\.([a-z_]+)` \|/gm)];
  const plain = [...rewrite.matchAll(/^\| `([a-z_]+)` \|/gm)].map((m) => m[1]);
  const blocks = [...new Set(rows.map((m) => m[1]))].sort();
  assert.deepEqual([...blocks, ...plain].sort(), keysOf(rulesBlock), 'docs/config.md, rewrite rules block');
  for (const block of blocks) {
    const keys = rows.filter((m) => m[1] === block).map((m) => m[2]).sort();
    assert.deepEqual(keys, keysOf(rulesBlock.properties[block]), `docs/config.md, rewrite rules ${block}`);
  }
});

test('the example config shows every key of the schema', () => {
  const example = fs.readFileSync(path.join(repoRoot, 'config/warmslot.example.yaml'), 'utf8');
  const shown = { ...maps, volatile_lines: rulesBlock.properties.volatile_lines,
    documents: rulesBlock.properties.documents, 'tenants.limits': schema.properties.tenants.properties.limits };
  for (const [where, node] of Object.entries(shown)) {
    for (const key of keysOf(node)) {
      assert.match(example, new RegExp(`^[ #-]*${key}:`, 'm'), `${where}.${key} is not in the example`);
    }
  }
});

test.after(() => fs.rmSync(dir, { recursive: true, force: true }));
