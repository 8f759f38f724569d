// The warmslot fixture: writes a config, starts the built binary, waits until it listens.
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot, startProcess, tempDir, waitFor } from './procs.mjs';

export function warmslotBin() {
  return process.env.WARMSLOT_BIN ?? path.join(repoRoot, 'build/proxy/warmslot');
}

export function yamlConfig({ backends, apiKeys = [], extra = '', logLevel }) {
  const lines = ['listen: 127.0.0.1:0', 'backends:'];
  for (const b of backends) {
    lines.push(`  - name: ${b.name}`);
    // A supervised backend gives its argv (a YAML flow list of JSON strings) instead of a url.
    lines.push(b.command ? `    command: ${JSON.stringify(b.command)}` : `    url: ${b.url}`);
    if (b.slotSaveDir) lines.push(`    slot_save_path: ${b.slotSaveDir}`);
    for (const l of b.lines ?? []) lines.push(`    ${l}`);
  }
  if (apiKeys.length) {
    lines.push('api_keys:');
    for (const k of apiKeys) lines.push(`  - "${k}"`);
  }
  // WARMSLOT_TEST_LOG_LEVEL=debug gives every warmslot a test starts debug logs.
  lines.push('log:', `  level: ${logLevel ?? process.env.WARMSLOT_TEST_LOG_LEVEL ?? 'info'}`);
  return `${lines.join('\n')}\n${extra}`;
}

// backends: [{ name, url | command, slotSaveDir?, lines? }]. Returns { url, port, proc, stop, configFile, logFile }.
// logLevel: the log's level (else WARMSLOT_TEST_LOG_LEVEL, else info).
export async function startWarmslot({ backends, apiKeys, extra, env, logLevel } = {}) {
  const dir = tempDir('warmslot');
  const configFile = path.join(dir, 'warmslot.yaml');
  fs.writeFileSync(configFile, yamlConfig({ backends, apiKeys, extra, logLevel }));
  const logFile = path.join(dir, 'warmslot.log');
  const proc = startProcess(warmslotBin(), ['--config', configFile], { logFile, env });
  const url = await waitFor('warmslot to listen', () => {
    if (!proc.running) throw new Error(`warmslot exited: ${fs.readFileSync(logFile, 'utf8')}`);
    const m = fs.readFileSync(logFile, 'utf8').match(/warmslot listening on (https?:\/\/[^\s]+)/);
    return m?.[1];
  }, 20000, 20);
  // Stopping checks that warmslot was still alive and exits cleanly on SIGTERM: a crash at
  // any point of a test fails that test.
  const stop = async () => {
    const died = !proc.running;
    const r = await proc.stop('SIGTERM', 15000);
    if (died || r.code !== 0) {
      const tail = fs.readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n');
      throw new Error(`warmslot ${died ? 'died' : 'did not stop cleanly'} (${JSON.stringify(r)}):\n${tail}`);
    }
  };
  return { url, port: Number(new URL(url).port), proc, configFile, logFile, dir, stop };
}

// Reads an SSE response body as it arrives; calls onEvent(dataString) per event.
export async function readSse(response, onEvent) {
  const decoder = new TextDecoder();
  let buffer = '';
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).trimStart()).join('\n');
      if (data && (await onEvent(data)) === false) return;
    }
  }
}
