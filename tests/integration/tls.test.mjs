// TLS on the listener: a self-signed certificate made here, the real openai client over HTTPS
// through warmslot to a real llama-server, plain HTTP on the TLS port, a handshake that does not
// finish in time, a renewed certificate picked up by a reload, and files that do not load.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import { startLlama } from './lib/llama.mjs';
import { repoRoot, tempDir, waitFor } from './lib/procs.mjs';
import { startWarmslot, warmslotBin } from './lib/warmslot.mjs';

const apiKey = 'tls-test-key-0001';

// A self-signed certificate for localhost and 127.0.0.1 (P-256: quick to make).
function makeCertificate(dir, name) {
  const cert = path.join(dir, `${name}-cert.pem`);
  const key = path.join(dir, `${name}-key.pem`);
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', `/CN=localhost/O=${name}`,
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'], { stdio: 'ignore' });
  fs.chmodSync(key, 0o600);
  return { cert, key, pem: fs.readFileSync(cert, 'utf8') };
}

const tlsLines = (c, extra = '') => `tls:\n  cert_file: ${c.cert}\n  key_file: ${c.key}\ntimeouts:\n  header_read: 2s\n${extra}`;

// GET over HTTPS trusting `ca`; resolves with status, body and the certificate served.
function httpsGet(port, target, ca) {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: '127.0.0.1', port, path: target, ca, servername: 'localhost',
      headers: { authorization: `Bearer ${apiKey}`, host: `localhost:${port}` }, agent: false }, (res) => {
      let body = '';
      const peer = res.socket.getPeerCertificate();
      res.on('data', (d) => { body += d; });
      res.on('end', () => resolve({ status: res.statusCode, body, fingerprint: peer.fingerprint256 }));
    });
    req.on('error', reject);
    req.setTimeout(30000, () => req.destroy(new Error('no answer in 30 s')));
  });
}

const fingerprintOf = (pem) => new crypto.X509Certificate(pem).fingerprint256;

test('the openai client over HTTPS through warmslot to llama-server; plain HTTP refused; a stalled handshake cut', { timeout: 300000 }, async () => {
  const dir = tempDir('tls');
  const first = makeCertificate(dir, 'first');
  const llama = await startLlama({ slots: 2, ctx: 4096 });
  let ws;
  try {
    ws = await startWarmslot({ backends: [{ name: 'b', url: llama.url }], apiKeys: [apiKey], extra: tlsLines(first) });
    assert.match(ws.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const base = `https://localhost:${ws.port}/v1`;

    // The real client, trusting only the system's CAs and the test's certificate.
    const run = spawnSync(process.execPath, [path.join(repoRoot, 'tests/integration/lib/tls-client.mjs'), base, apiKey], {
      encoding: 'utf8', env: { ...process.env, NODE_EXTRA_CA_CERTS: first.cert }, timeout: 180000,
    });
    assert.equal(run.status, 0, run.stderr);
    const got = JSON.parse(run.stdout.trim().split('\n').pop());
    assert.equal(got.object, 'chat.completion');
    assert.equal(got.backend, 'b');
    assert.equal(typeof got.content, 'string');
    assert.ok(got.chunks >= 2, `streamed in ${got.chunks} chunks`);
    assert.equal(got.finish, 'length');
    // Without the certificate trusted, the client refuses the connection: it is not plain HTTP
    // that merely looks like HTTPS.
    const untrusted = spawnSync(process.execPath, [path.join(repoRoot, 'tests/integration/lib/tls-client.mjs'), base, apiKey], {
      encoding: 'utf8', env: { ...process.env, NODE_EXTRA_CA_CERTS: '' }, timeout: 60000,
    });
    assert.notEqual(untrusted.status, 0);
    assert.match(untrusted.stderr, /certificate|Connection error/i);

    // Plain HTTP on the TLS port: a plain 400 that says so, then the connection closes.
    const plain = await new Promise((resolve, reject) => {
      const req = http.get({ host: '127.0.0.1', port: ws.port, path: '/health', agent: false }, (res) => {
        let body = '';
        res.on('data', (d) => { body += d; });
        res.on('end', () => resolve({ status: res.statusCode, body, connection: res.headers.connection }));
      });
      req.on('error', reject);
      req.setTimeout(30000, () => req.destroy(new Error('no answer in 30 s')));
    });
    assert.equal(plain.status, 400);
    assert.equal(plain.connection, 'close');
    assert.match(JSON.parse(plain.body).error.message, /speaks HTTPS/);

    // A handshake that never completes (a TLS record header, then a byte now and then) is cut
    // at timeouts.header_read, however steadily it sends.
    const closed = await new Promise((resolve, reject) => {
      const s = net.connect(ws.port, '127.0.0.1');
      let sent = 0;
      let timer;
      const trickle = () => {
        if (sent >= 200) return;  // bounded: 200 bytes at most
        s.write(Buffer.from([sent === 0 ? 0x16 : 0x03]));
        sent += 1;
        timer = setTimeout(trickle, 100);
      };
      s.on('connect', trickle);
      s.on('close', () => { clearTimeout(timer); resolve({ sent }); });
      s.on('error', () => {});
      setTimeout(() => { s.destroy(); reject(new Error('the stalled handshake was not cut within 30 s')); }, 30000).unref();
    });
    assert.ok(closed.sent < 200, `the server closed the connection after ${closed.sent} bytes`);

    // After all that, HTTPS still serves.
    const health = await httpsGet(ws.port, '/health', first.pem);
    assert.equal(health.status, 200);
    assert.equal(health.fingerprint, fingerprintOf(first.pem));
  } finally {
    if (ws) await ws.stop();
    await llama.stop();
  }
});

test('a reload reads a renewed certificate for new connections; files that do not load are refused', { timeout: 120000 }, async () => {
  const dir = tempDir('tls-reload');
  const first = makeCertificate(dir, 'first');
  const second = makeCertificate(dir, 'second');
  // A backend that is never called: the health of the proxy itself is enough here.
  const ws = await startWarmslot({ backends: [{ name: 'b', url: 'http://127.0.0.1:9' }], apiKeys: [apiKey], extra: tlsLines(first) });
  try {
    const ca = [first.pem, second.pem];
    assert.equal((await httpsGet(ws.port, '/health', ca)).fingerprint, fingerprintOf(first.pem));
    // Renewal: new files at the same paths, then SIGHUP.
    fs.copyFileSync(second.cert, first.cert);
    fs.copyFileSync(second.key, first.key);
    const reloads = () => (fs.readFileSync(ws.logFile, 'utf8').match(/config reloaded from/g) ?? []).length;
    const before = reloads();
    process.kill(ws.proc.child.pid, 'SIGHUP');
    await waitFor('the reload', () => reloads() > before, 20000);
    assert.equal((await httpsGet(ws.port, '/health', ca)).fingerprint, fingerprintOf(second.pem));
    // A key that does not match: the reload is refused and the running certificate stays.
    const third = makeCertificate(dir, 'third');
    fs.copyFileSync(third.key, first.key);
    const refusedBefore = (fs.readFileSync(ws.logFile, 'utf8').match(/config reload \(SIGHUP\) failed/g) ?? []).length;
    process.kill(ws.proc.child.pid, 'SIGHUP');
    await waitFor('the refused reload', () =>
      (fs.readFileSync(ws.logFile, 'utf8').match(/config reload \(SIGHUP\) failed/g) ?? []).length > refusedBefore, 20000);
    assert.match(fs.readFileSync(ws.logFile, 'utf8'), /private key does not match the certificate/);
    assert.equal((await httpsGet(ws.port, '/health', ca)).fingerprint, fingerprintOf(second.pem));
    // The key's content is never in the log.
    const keyBody = fs.readFileSync(third.key, 'utf8').split('\n').filter((l) => l && !l.startsWith('-----'))[0];
    assert.ok(!fs.readFileSync(ws.logFile, 'utf8').includes(keyBody));
  } finally {
    await ws.stop();
  }
});

test('TLS files that do not load stop warmslot at start with a clear error', { timeout: 60000 }, () => {
  const dir = tempDir('tls-bad');
  const a = makeCertificate(dir, 'a');
  const b = makeCertificate(dir, 'b');
  const cases = [
    [{ cert: a.cert, key: b.key }, /tls\.key_file .*b-key\.pem: the private key does not match the certificate/],
    [{ cert: path.join(dir, 'missing.pem'), key: a.key }, /tls\.cert_file .*missing\.pem: cannot load the certificate chain/],
  ];
  for (const [files, message] of cases) {
    const configFile = path.join(dir, 'warmslot.yaml');
    fs.writeFileSync(configFile, `listen: 127.0.0.1:0\nbackends:\n  - name: b\n    url: http://127.0.0.1:9\n${tlsLines(files)}`);
    const r = spawnSync(warmslotBin(), ['--config', configFile], { encoding: 'utf8', timeout: 30000 });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, message);
  }
});
