// The warmslot dashboard: polls GET /warmslot/status and draws it. Plain DOM and SVG, nothing
// fetched from anywhere but warmslot. Text from requests is only ever set as textContent.
'use strict';

const poll_ms = 2000;
const colors = { processed: '#c2541c', reused: '#2f8f4e', saved: '#2b62c4', ttft: '#7a4bb5',
  hit: '#2f8f4e', miss: '#c2541c', scratch: '#8a8f96', pass_through: '#2b62c4', failover: '#b5374b' };
const $ = (id) => document.getElementById(id);
let last = null;

// --- the key: kept for this tab only, sent with every call of the page ---
const key = () => sessionStorage.getItem('warmslot-key') ?? '';
function headers(json) {
  const h = json ? { 'content-type': 'application/json' } : {};
  if (key()) h.authorization = `Bearer ${key()}`;
  return h;
}
async function call(method, path, body) {
  const r = await fetch(path, { method, headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let data = null;
  try { data = JSON.parse(text); } catch { data = { error: { message: text } }; }
  return { status: r.status, data };
}
function askForKey(message) {
  $('main').hidden = true;
  $('key-form').hidden = false;
  $('key-error').textContent = message;
  setState('API key needed', 'bad');
}

// --- building the DOM ---
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
const fmtInt = (n) => (n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US'));
function fmtBytes(b) {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let u = 0;
  while (b >= 1000 && u < units.length - 1) { b /= 1000; u++; }
  return u === 0 ? `${b} B` : `${b.toFixed(1)} ${units[u]}`;
}
function fmtAgo(s) {
  if (s === null || s === undefined) return '-';
  if (s < 120) return `${Math.round(s)}s ago`;
  if (s < 7200) return `${Math.round(s / 60)}m ago`;
  if (s < 172800) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}
const fmtTime = (ms) => new Date(ms).toLocaleTimeString('en-GB');
// What a slot does now (status "now"): "priming 9,216 / 24,077 tokens, 4 s", with a progress bar
// when the total is known.
function fmtNow(n) {
  if (!n) return ['-'];
  const took = `${Math.round(n.seconds)} s`;
  if (n.done !== null && n.total) {
    const bar = el('progress', { max: n.total, value: Math.min(n.done, n.total) });
    return [bar, ` ${n.doing} ${fmtInt(n.done)} / ${fmtInt(n.total)} tokens, ${took}`];
  }
  if (n.done !== null) return [`${n.doing} ${fmtInt(n.done)} tokens, ${took}`];
  if (n.total) return [`${n.doing} ${fmtInt(n.total)} tokens, ${took}`];
  return [`${n.doing}, ${took}`];
}
function setState(text, cls) {
  $('state').textContent = text;
  $('state').className = `state ${cls}`;
}

// --- panels ---
function renderTotals(s) {
  const t = s.totals;
  const routes = t.requests_by_route;
  const routed = Object.values(routes).reduce((a, b) => a + b, 0);
  const hits = (routes.hit ?? 0) + (routes.wait_hit ?? 0);
  const tile = (label, value) => el('div', { class: 'tile' }, el('b', {}, value), label);
  $('totals').replaceChildren(
    tile('prompt tokens reused', fmtInt(t.prompt_tokens_reused)),
    tile('prompt tokens processed', fmtInt(t.prompt_tokens_processed)),
    tile('prefill seconds saved (estimate)', t.prefill_seconds_saved.toFixed(1)),
    tile('routed requests that hit', routed ? `${hits} of ${routed}` : '-'),
    tile('disk restores', fmtInt(s.disk.restores)),
    tile('disk snapshots', fmtInt(s.disk.snapshots)));
}

function renderBackends(s) {
  const blocks = s.backends.map((b) => {
    const head = el('h3', {}, b.name,
      el('span', { class: `badge ${b.healthy ? 'ok' : 'bad'}` }, b.healthy ? 'healthy' : 'down'),
      b.asleep ? el('span', { class: 'badge' }, b.router ? 'not loaded' : 'asleep') : null,
      el('span', { class: `badge ${b.routing ? 'ok' : 'bad'}` }, b.routing ? 'routing on' : 'passed through'));
    const facts = el('div', { class: 'muted' },
      (b.router ? `router ${b.router}, model id ${b.router_model} · ` : '')
      + `model ${b.model ?? '-'} · ${b.total_slots ?? '?'} slots of ${fmtInt(b.n_ctx_per_slot)} tokens · `
      + `prefill ${Math.round(b.prefill_tokens_per_second)} tokens/s · ${b.in_flight} in flight`
      + (b.identity ? ` · identity ${b.identity}` : ''));
    const note = b.routing ? null : el('div', { class: 'note' }, `Why: ${b.pass_through_reason}`);
    const rows = b.slots.map((sl) => el('tr', { class: 'slot', 'data-backend': b.name, 'data-slot': sl.id },
      el('td', {}, sl.id), el('td', {}, sl.state + (sl.scratch ? ' (scratch)' : '')),
      el('td', { class: 'num' }, fmtInt(sl.tokens)), el('td', {}, fmtAgo(sl.last_use_seconds_ago)),
      el('td', { class: 'now' }, ...fmtNow(sl.now)),
      el('td', { class: 'preview' }, sl.preview === null ? (s.previews ? '-' : '(previews off)')
        : (sl.label ? `label: ${sl.preview}` : sl.preview))));
    const table = el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'slot'), el('th', {}, 'state'),
      el('th', { class: 'num' }, 'tokens'), el('th', {}, 'last use'), el('th', {}, 'now'), el('th', {}, 'holds'))), el('tbody', {}, rows));
    return el('div', { class: 'backend' }, head, facts, note, table);
  });
  $('backends').replaceChildren(...blocks);
}

function renderDisk(s) {
  const d = s.disk;
  if (!d.enabled || d.dirs.length === 0) {
    $('disk').replaceChildren(el('p', { class: 'muted' },
      'No disk tier: give a backend slot_save_path (and start its llama-server with --slot-save-path).'));
    return;
  }
  const parts = [el('p', {}, `${d.restores} restores, ${d.restore_failures} failed restores, `
    + `${d.snapshots} snapshots on the request path since warmslot started.`)];
  for (const dir of d.dirs) {
    const share = dir.budget_bytes ? Math.min(1, dir.used_bytes / dir.budget_bytes) : 0;
    const bar = el('div', {});
    bar.style.width = `${(share * 100).toFixed(1)}%`;
    parts.push(el('div', {}, el('b', {}, dir.dir), ` (${dir.backends.join(', ')}): `
      + `${fmtBytes(dir.used_bytes)} of ${fmtBytes(dir.budget_bytes)}`), el('div', { class: 'budget' }, bar));
    const now = s.now / 1000;
    const rows = dir.files.map((f) => el('tr', { class: 'disk-file' }, el('td', { class: 'preview' }, f.file),
      el('td', { class: 'num' }, fmtInt(f.tokens)), el('td', { class: 'num' }, fmtBytes(f.bytes)),
      el('td', { class: 'num' }, `${f.value_seconds.toFixed(1)} s`), el('td', { class: 'num' }, f.hits),
      el('td', {}, fmtAgo(now - f.last_used))));
    parts.push(rows.length ? el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'file'),
      el('th', { class: 'num' }, 'tokens'), el('th', { class: 'num' }, 'size'), el('th', { class: 'num' }, 'value'),
      el('th', { class: 'num' }, 'restores'), el('th', {}, 'last use'))), el('tbody', {}, rows))
      : el('p', { class: 'muted' }, 'No files yet.'));
  }
  $('disk').replaceChildren(...parts);
}

// --- charts: a small SVG line chart, one polyline and its points per series ---
const svgNs = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, text) {
  const e = document.createElementNS(svgNs, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function lineChart(target, series, unit) {
  const W = 480, H = 180, L = 48, R = 8, T = 8, B = 34;
  const all = series.flatMap((s) => s.points);
  target.replaceChildren();
  target.dataset.points = String(all.length);
  if (all.length === 0) {
    target.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, 'no requests in the last hour'));
    return;
  }
  let t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(...all.map((p) => p[0]));
  if (t1 === t0) { t0 -= 30000; t1 += 30000; }
  const vmax = Math.max(1e-9, ...all.map((p) => p[1])) * 1.1;
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (v) => T + (1 - v / vmax) * (H - T - B);
  target.append(svg('line', { class: 'axis', x1: L, y1: y(0), x2: W - R, y2: y(0) }),
    svg('line', { class: 'axis', x1: L, y1: T, x2: L, y2: y(0) }),
    svg('text', { x: L - 4, y: T + 8, 'text-anchor': 'end' }, `${+(vmax / 1.1).toPrecision(3)}${unit}`),
    svg('text', { x: L - 4, y: y(0), 'text-anchor': 'end' }, '0'),
    svg('text', { x: L, y: H - B + 14 }, fmtTime(t0)),
    svg('text', { x: W - R, y: H - B + 14, 'text-anchor': 'end' }, fmtTime(t1)));
  let lx = L;
  for (const s of series) {
    if (s.points.length === 0) continue;
    const color = colors[s.name] ?? '#555';
    target.append(svg('polyline', { class: 'line', stroke: color,
      points: s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ') }));
    for (const p of s.points) {
      const c = svg('circle', { class: 'pt', cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 2.5, fill: color });
      c.append(svg('title', {}, `${s.label ?? s.name} ${fmtTime(p[0])}: ${+p[1].toPrecision(4)}${unit}`));
      target.append(c);
    }
    target.append(svg('rect', { x: lx, y: H - 12, width: 8, height: 8, fill: color }),
      svg('text', { x: lx + 11, y: H - 4 }, s.label ?? s.name));
    lx += 20 + 6 * (s.label ?? s.name).length;
  }
}
function renderCharts(s) {
  const pts = s.series.points;
  $('series-note').textContent = `(${s.series.bucket_seconds} s buckets, last hour)`;
  const of = (f) => pts.filter((p) => f(p) !== null && f(p) !== undefined).map((p) => [p.t, f(p)]);
  lineChart($('chart-tokens'), [{ name: 'processed', points: of((p) => p.processed) },
    { name: 'reused', points: of((p) => p.reused) }], '');
  lineChart($('chart-saved'), [{ name: 'saved', label: 'seconds saved', points: of((p) => p.saved_seconds) }], ' s');
  const routes = ['hit', 'miss', 'scratch', 'pass_through', 'failover']
    .filter((r) => pts.some((p) => p.routes[r] > 0));
  lineChart($('chart-routes'), routes.map((r) => ({ name: r, points: of((p) => p.routes[r]) })), '');
  lineChart($('chart-ttft'), [{ name: 'ttft', label: 'prefill ms', points: of((p) => p.prefill_ms) }], ' ms');
}

// --- the request list, filtered in the page ---
function routeClass(route) {
  return route.startsWith('hit') ? 'hit' : route.startsWith('miss') ? 'miss' : '';
}
function renderRequests(s) {
  const text = $('filter').value.trim().toLowerCase();
  const route = $('route-filter').value;
  const shown = s.requests.filter((r) => {
    if (route === 'disk' && !r.disk) return false;
    if (route && route !== 'disk' && !(r.route || 'pass_through').startsWith(route)) return false;
    if (!text) return true;
    return [r.id, r.method, r.path, r.status, r.backend, r.route, r.disk, r.rewrites, r.error]
      .join(' ').toLowerCase().includes(text);
  });
  $('request-count').textContent = `${shown.length} of ${s.requests.length}`;
  const rows = shown.map((r) => el('tr', { class: `request ${routeClass(r.route)}` },
    el('td', {}, fmtTime(r.at)), el('td', {}, `${r.method} ${r.path}`),
    el('td', {}, r.status + (r.error ? ` ${r.error}` : '') + (r.client_gone ? ' client gone' : '')),
    el('td', {}, r.slot === null ? (r.backend || '-') : `${r.backend}/${r.slot}`),
    el('td', { class: 'route' }, r.route || '-'), el('td', { class: 'disk' }, r.disk || '-'),
    el('td', {}, r.rewrites || '-'), el('td', { class: 'num' }, fmtInt(r.cached)),
    el('td', { class: 'num' }, fmtInt(r.processed)), el('td', { class: 'num' }, Math.round(r.ms))));
  $('requests').tBodies[0].replaceChildren(...rows);
}

// Swap groups: which member holds each group's places, who waits, and what swaps cost so far.
function renderSwaps(s) {
  const groups = s.swaps?.groups ?? [];
  $('swaps-panel').hidden = groups.length === 0;
  if (!groups.length) return;
  const t = s.swaps.totals;
  const places = (g) => (g.allow ? g.allow.map((set) => set.join('+')).join(' | ') : g.max_running);
  const rows = groups.map((g) => el('tr', {}, el('td', {}, g.name), el('td', {}, places(g)),
    el('td', {}, g.members.map((m) => `${m.backend} (${m.state}${m.home ? ', home' : ''}` +
      `${m.waiting ? `, ${m.waiting} waiting` : ''})`).join(', '))));
  $('swaps').replaceChildren(
    el('table', {}, el('tr', {}, el('th', {}, 'group'), el('th', {}, 'places'), el('th', {}, 'members')), rows),
    el('p', { class: 'muted' }, `${fmtInt(t.swaps)} swaps: drain ${t.drain_seconds.toFixed(1)} s, ` +
      `save ${t.save_seconds.toFixed(1)} s, stop ${t.stop_seconds.toFixed(1)} s, ` +
      `start ${t.start_seconds.toFixed(1)} s, restore ${(t.restore_seconds ?? 0).toFixed(1)} s; ` +
      `${fmtInt(t.failed_starts)} failed starts`));
}

function render(s) {
  last = s;
  renderTotals(s);
  renderBackends(s);
  renderSwaps(s);
  renderDisk(s);
  renderCharts(s);
  renderRequests(s);
  const model = $('warm-model');
  if (!model.value) model.value = s.backends.flatMap((b) => b.models)[0] ?? '';
  $('updated').textContent = `updated ${fmtTime(s.now)}`;
}

// --- polling ---
async function refresh() {
  try {
    const r = await call('GET', '/warmslot/status');
    if (r.status === 401) {
      askForKey(key() ? 'That key was refused.' : '');
      return; // polling resumes when a key is given
    }
    if (r.status !== 200) throw new Error(r.data?.error?.message ?? `HTTP ${r.status}`);
    $('key-form').hidden = true;
    $('main').hidden = false;
    $('forget-key').hidden = !key();
    setState('live', 'ok');
    render(r.data);
  } catch (e) {
    setState(`unreachable: ${e.message}`, 'bad');
  }
  setTimeout(refresh, poll_ms);
}

// --- actions ---
$('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem('warmslot-key', $('key').value);
  $('key').value = '';
  refresh();
});
$('forget-key').addEventListener('click', () => {
  sessionStorage.removeItem('warmslot-key');
  location.reload();
});
$('filter').addEventListener('input', () => last && renderRequests(last));
$('route-filter').addEventListener('change', () => last && renderRequests(last));
$('snapshot').addEventListener('click', async () => {
  $('snapshot-result').textContent = 'saving…';
  const r = await call('POST', '/admin/snapshot', {});
  $('snapshot-result').textContent = r.status === 200
    ? `saved ${r.data.saved.length}, skipped ${r.data.skipped.length}`
    : `failed: ${r.data?.error?.message ?? r.status}`;
});
$('warm-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const files = [...$('warm-files').files];
  $('warm-result').textContent = `reading ${files.length} file(s)…`;
  const documents = await Promise.all(files.map((f) => f.text()));
  $('warm-result').textContent = 'warming: the backend reads the documents now…';
  const r = await call('POST', '/admin/warm',
    { model: $('warm-model').value, system: $('warm-system').value, documents });
  $('warm-result').textContent = r.status === 200
    ? (r.data.saved ? `saved ${r.data.tokens} tokens on ${r.data.backend} slot ${r.data.slot}`
      : `not saved: ${r.data.reason}`)
    : `failed: ${r.data?.error?.message ?? r.status}`;
});

refresh();
