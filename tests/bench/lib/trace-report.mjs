// The trace replay's tables (markdown): one per model and API, and warmslot's excess per route.
const fmt = (n) => Math.round(n).toLocaleString('en-US');
const sec = (ms) => `${(ms / 1000).toFixed(2)} s`;

// The better llama-server-alone row of a run (fewest tokens), restarted the same way.
export function bestAlone(results, restart) {
  const alone = results.filter((r) => r.id === 'defaults' || r.id === 'np').filter((r) => r.restart === restart);
  return alone.sort((a, b) => a.computed - b.computed)[0];
}

export function traceReport(run, o) {
  const { arch, api, w, bound, results } = run;
  const lines = [
    `### ${arch}, ${w.users.length} users on ${o.slots} slots, ${api === 'messages' ? 'Messages' : 'Chat Completions'}${o.subagentsOnly ? ', with sub-agents' : ''}`, '',
    `Traces ${w.users.map((u) => u.trace).join(', ')} (seed ${o.seed}); ${w.requests} requests; prompts ` +
    `${fmt(run.minPrompt)} to ${fmt(run.longest)} tokens; -c ${fmt(run.ctx)} in every row; lower bound ${fmt(bound)} tokens.`, '',
    '| configuration | restart halfway | prompt tokens computed | x bound | TTFT p50 | TTFT p95 | errors | wall s |',
    '|---|---|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of results) {
    const label = r.label.replace('-np N', `-np ${o.slots}`);
    lines.push(`| ${r.warmslot ? `**${label}**` : label} | ${r.restart ? 'yes' : 'no'} | ` +
      `${fmt(r.computed)} | ${(r.computed / r.bound).toFixed(2)} | ${sec(r.ttft50)} | ${sec(r.ttft95)} | ${r.errors} | ${r.wall.toFixed(0)} |`);
  }
  const mism = results.filter((r) => r.mismatched);
  if (mism.length) {
    lines.push('', `Requests whose prompt size differs from the rendered one: ${mism.map((r) => `${r.id}: ${r.mismatched}`).join(', ')}.`);
  }
  lines.push('');
  for (const r of results.filter((x) => x.excess)) {
    const best = bestAlone(results, r.restart);
    const x = r.computed / r.bound;
    const target = r.restart ? 1.15 : 1.10;
    lines.push(`${r.label.replace('-np N', `-np ${o.slots}`)}${r.restart ? ', restarted halfway' : ''}: ` +
      `${x <= target ? 'PASS' : 'FAIL'} at most ${target.toFixed(2)}x the bound (${x.toFixed(2)})` +
      (best ? `; ${r.computed <= best.computed ? 'PASS' : 'FAIL'} never more than the better llama-server alone ` +
        `(${best.id === 'np' ? `-np ${o.slots}` : 'defaults'}: ${fmt(best.computed)}, warmslot ${fmt(r.computed)})` : '') +
      '. Tokens beyond the bound per route and disk action:', '',
      '| route / disk | requests | computed (primed) | bound | excess |', '|---|---:|---:|---:|---:|');
    for (const g of r.excess) {
      lines.push(`| ${g.what} | ${g.requests} | ${fmt(g.computed)}${g.primed ? ` (${fmt(g.primed)})` : ''} | ${fmt(g.bound)} | ${fmt(g.excess)} |`);
    }
    lines.push('');
  }
  return lines.join('\n');
}
