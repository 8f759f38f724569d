// Sends a long document and two questions through warmslot and shows what the cache did.
//   node deploy/demo-client.mjs http://127.0.0.1:8080 [API_KEY]
const [base, key] = process.argv.slice(2);
const headers = { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}) };
const doc = Array.from({ length: 120 }, (_, i) =>
  `Line ${i + 1}: the harbour ledger records lanterns, violins and compasses shipped that day.`).join('\n');

async function ask(question) {
  const t0 = performance.now();
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers,
    body: JSON.stringify({
      messages: [{ role: 'system', content: `Answer from this document:\n${doc}` },
        { role: 'user', content: question }],
      max_tokens: 16, temperature: 0,
    }),
  });
  const body = await res.json();
  const ms = performance.now() - t0;
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${JSON.stringify(body)}`);
  const t = body.timings ?? {};
  const h = (name) => res.headers.get(`x-warmslot-${name}`);
  // warmslot's counts: what it computed to prime the slot (restoring a prefix from disk, say)
  // is work done for this request, though llama-server then reports it as cached.
  const processed = h('processed-tokens') ?? t.prompt_n;
  const cached = h('cached-tokens') ?? t.cache_n;
  const primed = Number(processed) - Number(t.prompt_n);
  const reused = Math.max(0, Number(cached) - Math.max(0, primed));
  console.log(`  "${question}" -> HTTP ${res.status}, backend ${h('backend')} slot ${h('slot')}, ` +
    `route: ${h('route')}${h('disk') ? `, disk: ${h('disk')}` : ''}\n` +
    `      ${processed} prompt tokens processed${primed > 0 ? ` (${primed} to prime the slot)` : ''}, ` +
    `${reused} reused from the cache, ${ms.toFixed(0)} ms`);
}

console.log(`\nA document of ${doc.length} bytes and two questions through ${base}:`);
await ask('Which items does the ledger record?');
await ask('On which line is the ledger first mentioned?');
console.log('The second question reuses the document the first one left in its slot; the first one\n' +
  'also saved that document to disk as a slot file, so it survives a llama-server restart.');
