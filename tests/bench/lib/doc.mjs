// Writes the routing benchmark's tables into docs/benchmarks.md, between
// <!-- routing:begin --> and <!-- routing:end -->, leaving the rest of the file as it is.
// Each table is its own block keyed by arch, preset and workload, so a run of one workload
// replaces that table only.
import fs from 'node:fs';
import { allWorkloadNames } from './workloads.mjs';

const begin = '<!-- routing:begin -->';
const end = '<!-- routing:end -->';
const blockRe = /<!-- routing-run:([\w.-]+):begin -->\n([\s\S]*?)<!-- routing-run:\1:end -->\n?/g;

const intro = `## Cache-aware routing

What warmslot's routing saves on real llama-server processes, compared with llama-server alone
under several cache settings. The tables measured on 2026-12-01 were taken before fingerprint
format 2 (only what reaches the rendered prompt enters a key) and the planning of floating
Messages requests where llama-server's own slot choice puts them; those change what the \`agent\`
workload (Messages) routes, so its rows in particular are due for a rerun. Reproduce with

\`\`\`
node tests/bench/routing.mjs [--workload interleaved|docqa|messages|replicas|restart|agent|long] [--preset tiny|bench] [--arch llama|qwen35] [--load N] [--write-doc] [--long-tokens N]
node tests/bench/routing.mjs --all
\`\`\`

\`--all\` runs every workload on both models, each idle and with \`--load 1\` (\`long\` idle only, last),
and writes every table and the summary as it goes, so an interrupted run keeps what it measured.
On an idle 2-core machine (2026-12-01, load average below 2) one model's workloads took about
2 minutes idle, and \`long\` on both models 3.5 minutes (prefill 45 s on \`qwen35\`, 95 s on
\`llama\`); with \`--load 1\` the same workloads take 20 minutes and more per model (llama-server's
two threads then share one core with the load), and far longer when other work keeps the load
average above 10 (the \`long\` prefill alone took 8 and 12.5 minutes at 13 to 18).

\`WARMSLOT_BIN\` points at the warmslot binary to measure (the run copies it first, so a rebuild
during the run changes nothing); \`--extra-configs\` adds warmslot in front of \`--cache-ram 0\`
servers. Per-request details (warmslot's route, backend and slot, tokens cached and processed,
times) go to one JSON file per workload, whose path the command prints.

Each workload is a request sequence generated from a fixed seed. One run replays the same
sequence against every configuration, one configuration after the other, on the same machine with
the same model and fresh server processes, so the ratios between rows of one table were measured
side by side. Times depend on machine load, and so do warmslot's token counts (its choices
depend on timing: which slot it believes busy, learned prefill rates); llama-server's alone do
not. The machine is shared, so each table gives the load average seen during its run.

- **Load** (\`load=N\` in a table's heading): with \`--load N\` the benchmark starts N processes
  that each keep a core busy (a busy loop, started before the first configuration and stopped
  after the last one, also on an error or Ctrl-C), so that every configuration of the table
  runs on a machine with N cores taken, as users' machines often are. \`load=0\` starts none
  (other work on the shared machine still shows in the load average).

- **Client**: one request at a time (a sequential client), each \`stream: true\` with
  \`max_tokens: 4\` and \`temperature: 0\`. Sequential requests make every row's prefill work and
  time to first token its own rather than time spent queueing behind other clients; concurrency
  is left to other benchmarks.
- **Prompt tokens processed**: the sum over the run's llama-server processes of the increase of
  \`llamacpp:prompt_tokens_total\` (\`/metrics\`) from just before the first request to just after
  the last one. warmslot's start-up probe (a token or two per slot probed, once per backend
  start) happens before and is listed under the table instead.
- **Lower bound**: each distinct prefix processed once, plus every question: every request's
  prompt tokens (the server's \`/apply-template\` rendering, tokenized by \`/tokenize\` as
  completions tokenize it) minus the longest token prefix it shares with any earlier request of
  the run (at least one token is always processed). Subtracting only a repeated system part gives
  a slightly higher figure, shown under each table, that llama-server itself beats on a plain
  model, because consecutive questions on one document also share the start of the user turn.
  A hybrid model cannot reach the bound: it can only resume from a checkpoint, the nearest one
  being at the start of the last user message.
- **TTFT**: from sending the request to the first SSE data event that carries text
  (\`delta.content\`); llama-server sends its first event, the role-only one, together with the
  first token, so the first event of any kind arrives at the same moment. A response without any
  text would count until its end. Median and p90 (nearest rank) over all requests of the workload.
- **Wall s**: first request sent to last response read; server start-up excluded.
- **Replays**: llama-server alone processes the same number of tokens every time the sequence is
  replayed, but warmslot's choices depend on timing (which slot it believes busy, learned
  prefill rates), so each warmslot row is replayed 3 times (\`--warmslot-runs N\`) on fresh
  processes; the row shows the replay with the median token count and the line under the table
  lists all of them.
- **Configurations**: llama-server with an explicit \`-np 2\` and its default \`--cache-ram\` (8192 MiB);
  llama-server with all its defaults (no \`-np\`: 4 slots sharing one unified KV cache of the
  model's full context, which is what a plain \`llama-server -m model.gguf\` runs); \`--cache-ram 0\`
  (no host-RAM prompt cache); \`--cache-ram 64\` (\`2048\` with the bench preset): an 8B model
  keeps about 128 KB of KV per token, so the default 8 GiB holds some 64K of its tokens; the tiny
  model keeps about 1 KB per token and the bench model about 32 KB, so these sizes hold about as
  many tokens here; and warmslot (its default configuration) in front of \`-np 2\` servers. In
  \`replicas\`, llama-server alone means the client spreads its requests round-robin over the two
  processes, as a plain load balancer would.
- **Targets** for warmslot: at most 1.1x the lower bound; at least 4x fewer prompt tokens than
  llama-server with \`--cache-ram 0\`; never more prompt tokens than llama-server alone with its
  defaults. They are reported, not enforced.
- **Restart workload** (\`restart\`): the documents are warmed first (through warmslot with
  \`POST /admin/warm\`, the call behind \`warmslot warm\`, which primes each document on an idle
  slot and saves it to the backend's \`--slot-save-path\`; llama-server alone gets one question per
  document, which fills its slots and RAM cache), then the llama-server process is stopped and
  started again on the same port and slot directory, and only then are the questions replayed
  and counted. Nothing survives the restart in llama-server's memory, so llama-server alone
  reprocesses every document; warmslot restores each document's file into a slot and computes
  only the question. Its lower bound is the questions' own tokens (every prompt minus its
  document), and its **target** is at most 1.05x that bound after the restart, on both the plain
  \`llama\` and the hybrid \`qwen35\` model (\`--arch qwen35\`); warmslot runs it with
  \`cache.min_prefix_tokens: 512\` because the bench preset's documents are shorter than the
  default threshold. The count is every prompt token llama-server computed after the restart,
  so it includes warmslot's own check of the new process: its slot probe (two prompts of a token or
  two on these models; 21 tokens each until 2026-12-07) when the probe comes after the counting
  starts, as it did in two of three replays with one core busy on 2026-12-01 (565 = 523 + 42:
  1.08x, the per-request counts were the bound's in all three).
- **Messages workload** (\`messages\`): \`docqa\`'s requests sent over OpenAI chat completions and
  over Anthropic Messages (\`/v1/messages\`, streamed; the document as \`system\`, the question as the
  user message), to llama-server alone and through warmslot. llama-server drops \`id_slot\` from a
  Messages body, so warmslot cannot pin those requests: it predicts llama-server's own slot choice
  and prepares that slot. **Target**: through warmslot, Messages cost no more prompt tokens than
  the same requests over chat completions, and no more than Messages straight to llama-server.
- **Coding-agent workload** (\`agent\`): sessions of a coding agent sent to \`/v1/messages\` as
  such agents send them (system blocks with a per-request billing line, a tool list, a dated
  reminder and the question in the first user message, a long system-role agent list after it,
  then tool round trips); three sessions, a llama-server restart, a fourth session. warmslot runs
  with its default configuration and with the coding-agent rules of the README
  (\`system_messages: front\`, dated system lines moved). Its **targets**: with the rules, a new
  session's first call and the first call after the restart compute at most 10% of their prompt;
  without them, no session computes more than with llama-server alone. The generated models'
  ChatML template does not render tools, so the tool list changes the request but not the prompt.
- **Presets**: \`tiny\` (default) runs the first three workloads in about 3 minutes on a lightly loaded
  2-core machine (11 minutes were measured while builds shared the cores). \`bench\`
  uses the larger generated model, which prefills only about 220 to 270 tokens/s on 2 cores, so
  its workloads are scaled down (documents of 1,500 to 2,000 tokens, 3 or 4 questions each, 6
  short chats in \`interleaved\`) and are best run one \`--workload\` at a time (\`docqa\`: 3 minutes on
  an idle machine, 9.5 minutes measured under load).
- **Long document** (\`long\`): one document of about 130,000 tokens (the generated models'
  context is 131,072 tokens per slot; llama-server runs with \`-np 2 -c 262144\` and its default
  \`-fa auto\`, which turns flash attention on for these CPU runs) and a question, through warmslot
  with a slot directory on the machine's disk. \`--long-tokens N\` runs it on a document of about N
  tokens instead (a few minutes for 16,000 to 32,000; such tables are printed, not written here).
  The first request is a new prefix: warmslot primes a slot with the document and saves it; the
  prefill time is llama-server's own \`prompt eval time\` of that prime (its log). Then, three
  times each, llama-server is restarted and the document is asked about again once warmslot
  routes the restarted backend (its check of the new process and its slot probe, two tiny
  prompts once per backend start, are done first: they are no part of a restore): warmslot
  restores the file into a slot, with the file's pages still in the page cache (warm) or dropped
  from it first (cold: \`tests/bench/drop_pages.py\` flushes the file and calls
  \`posix_fadvise(POSIX_FADV_DONTNEED)\` on it; \`fincore\` checks that nothing stayed). The restore
  time is llama-server's \`timings.restore_ms\`, which warmslot keeps in its index. Then warmslot
  is stopped and the same six restarts are repeated without it: \`POST /slots/0?action=restore\`
  straight to llama-server (its \`restore_ms\` and the POST's wall time), then the same request
  pinned to slot 0. The rows "restore by llama-server directly" and the two "time to first
  token" pairs (through warmslot against the direct POST plus the direct request) separate
  warmslot's share from llama-server's. Then, with no process of the benchmark running,
  \`dd bs=1M\` reads the same file three times each cold, warm and with \`iflag=direct\` (past the
  page cache). Throughput is the file's bytes over those seconds. **Reference**: a llama-server
  fork with a disk cache built in restores at the device's speed (116,896 tokens on a 27B hybrid
  model: 163 s of prefill against about 1.9 s warm and 25 s cold from an HDD, 86x and 6.5x less
  than the prefill); warmslot, which restores through stock llama-server's
  \`POST /slots/{id}?action=restore\`, should come within a few percent of \`dd\`'s throughput on the
  same file. Each table says what it measured against that. \`restore_ms\` is llama-server's own
  time for the whole restore (opening and reading the file, copying it into the cache tensors,
  rebuilding the per-cell metadata), and warmslot adds nothing inside it.
- **Where a restore's time goes** (measured 2026-12-01 on this 2-core VM, load average 1 to 4,
  llama-server b1-80fb11a; \`perf record\`/\`perf stat\` on llama-server while it restored, and the
  direct rows above). warmslot's share is nil within the noise: through it, the time to first
  token after a restart equals the direct restore's POST plus the direct request (0.20 s against
  0.20 s warm, 0.20 s against 0.22 s cold on 32,000 tokens), and the two \`restore_ms\` agree
  (0.96x to 1.15x). Everything else happens inside stock llama-server's
  \`llama_state_seq_load_file\` (\`src/llama-context.cpp\`, \`src/llama-kv-cache.cpp\`), in three
  parts, the first two of which \`dd\` does not have (neither the slot count, 1, 2 or 4, nor the
  context per slot, 32,768 or 131,072 tokens, changed a restore's time measurably):
  1. *Fresh memory in a new process.* The restore reads every tensor's bytes into a temporary
     \`std::vector\` (\`llama_io_read_file::read_tensor\`, which zero-fills it on resize) before
     copying them into the cache, and \`apply_ubatch\` allocates two \`std::set\` nodes per token
     (\`llama_kv_cells::used\` and \`seq_pos\`). The cache itself was zeroed at start-up, but this
     memory is new to a fresh process: glibc's malloc takes it from the kernel page by page,
     and in this VM each 4 KiB page fault costs 15 to 20 µs. 128,000 tokens (133 MB, \`llama\`,
     file in the page cache; a real 16,000-token file with its cells written 8 times, restored four
     times into one new llama-server: slot 0, slot 0 again, slot 1, slot 1 again) took 333 ms
     with 11,907 page faults the first time, 363 ms (8,129 faults: glibc had raised its mmap
     threshold and grew its heap instead) the second, 80 ms (129 faults) the fourth; \`qwen35\`
     (69 MB, made the same way): 540 ms first, 118 ms steady. This is what the full-size tables
     measure: every restore there follows a restart.
     With \`GLIBC_TUNABLES=glibc.malloc.hugetlb=1\` in llama-server's environment (glibc 2.35 or
     later, transparent huge pages \`madvise\` or \`always\`) glibc backs that memory with 2 MiB
     pages: 863 faults and 88 ms the first time for the same \`llama\` file, 89 ms for the
     \`qwen35\` one. Measured with this benchmark (each row the
     median of 3, one run each; the prefill shows the load was alike):

     | \`node tests/bench/routing.mjs --workload long --long-tokens 32000\` (33.3 MB file) | as is | \`GLIBC_TUNABLES=glibc.malloc.hugetlb=1\` |
     |---|---:|---:|
     | restore through warmslot, warm / cold (\`restore_ms\`) | 64.0 / 69.2 ms | 15.1 / 22.0 ms |
     | restore by llama-server directly, warm / cold (\`restore_ms\`) | 65.8 / 79.7 ms | 14.9 / 21.2 ms |
     | \`dd bs=1M\`, warm / cold | 5.7 / 12.0 ms | 6.0 / 12.9 ms |
     | time to first token after a restart, warm: through warmslot / direct POST plus request | 0.20 / 0.20 s | 0.14 / 0.14 s |
     | prefill of the document | 5.92 s | 6.02 s |

  2. *Per-token bookkeeping.* For each token \`state_read_meta\` reads its position, sequence count
     and sequence id (on \`qwen35\` also a 12-byte position extension) with one \`fread\` each, and
     each \`fread\` goes with an \`ftello\` and an \`ferror\` (\`llama_file::impl::read_raw_unsafe\`);
     \`apply_ubatch\` then inserts the cell into the two sets, and when the slot held another
     sequence \`seq_rm\` first erases that one's cells from them. About 0.4 µs per token whatever
     the model: in steady restores of 128,000 tokens into a slot that held as many (huge pages
     on, 80 to 117 ms), metadata reads took 23% of the time, set inserts 32%, \`seq_rm\` 16%, the
     bytes 26%. The tiny models keep only 1,040 (\`llama\`) and 540 (\`qwen35\`) bytes per token,
     so this part outweighs the bytes several times; a real model keeps some 100 times more per
     token (128 KiB for an 8B Llama at f16) and it shrinks to a few percent.
  3. *The bytes*: read into the temporary vector, then copied into the cache tensor (two copies
     where \`dd\` makes one into a buffer it reuses). With \`-fa off\` the V cache is transposed and
     every one of its rows is a separate \`read\` and \`ggml_backend_tensor_set\`
     (\`n_layer x n_embd_v_gqa\` per restore: about 16,000 \`read\` calls for 4,000 tokens of the
     bench-preset model). On that model (32,784 bytes per token, a 131 MB file of 4,000
     tokens, where bytes dominate), with huge pages: 13 to 33 ms per restore with flash
     attention on (32 to 66 ms the first time) and 42 to 50 ms with \`-fa off\`, against 13 to 16 ms
     for \`dd\` from the page cache; without them 14 to 60 ms and 50 to 170 ms, 60 to 140 ms the
     first time.

  So on stock llama-server warmslot reaches the device's speed only where bytes per token are
  large (real models), flash attention is on and llama-server runs with huge pages for malloc;
  the fixed per-token cost and the second copy can only go away in llama.cpp (one bulk read of
  the cell metadata, no \`ftello\` per read, reading straight into a host tensor). A file restores
  only into a server with the same flash-attention setting (the V layout differs): switching it
  makes llama-server refuse the old files, which warmslot then drops and recomputes once (and a
  \`command:\` backend whose flag changes gets new file names).
`;

function order(key) {
  const [arch, preset, workload, load] = key.split('-');
  return [arch === 'llama' ? 0 : 1, preset === 'tiny' ? 0 : 1, allWorkloadNames.indexOf(workload),
    Number((load ?? 'load0').slice(4))];
}

const summaryRe = /<!-- routing-summary:(\{.*\}) -->/;
const fmtInt = (n) => (n === undefined || n === null ? '–' : Math.round(n).toLocaleString('en-US'));

// One row per table that carries summary numbers: warmslot's default configuration against
// llama-server alone and the lower bound, idle and loaded.
function summaryTable(blocks) {
  const rows = [...blocks.keys()].sort(compare).map((k) => blocks.get(k).match(summaryRe))
    .filter(Boolean).map((m) => JSON.parse(m[1]));
  if (!rows.length) return '';
  const lines = [
    '### Summary: warmslot against llama-server alone and the lower bound',
    '',
    'Prompt tokens processed by warmslot (its default configuration in front of `llama-server -np 2`, ' +
    'the median of its replays) against llama-server alone with `-np 2` and its default `--cache-ram`, ' +
    'llama-server with all its defaults, and the lower bound, from the tables below. The targets: never ' +
    'more tokens than llama-server alone (both settings; `agent`: in every session), and at most 1.1x the ' +
    'lower bound (`restart`: 1.05x; `agent` has no lower bound). `load=1`: one core kept busy by the ' +
    'benchmark during the run. Tables written by a version of the benchmark without this summary are ' +
    'not in it; rerun them (or `--all`) to add them.',
    '',
    '| workload | model | load | 1-min load average | lower bound | llama-server -np 2 | llama-server, defaults | ' +
    'warmslot | warmslot x lower bound | warmslot replays | never more than alone | at most the target x lower bound |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|',
  ];
  for (const r of rows) {
    const alone = [r.np2, r.defaults].filter((x) => x !== undefined && x !== null);
    const never = r.neverMore ?? alone.every((a) => r.ws <= a);
    const x = r.bound ? r.ws / r.bound : undefined;
    lines.push(`| ${r.workload} | ${r.arch}${r.preset === 'tiny' ? '' : ` (${r.preset})`} | ${r.load} | ` +
      `${r.loadavg ? `${r.loadavg[0].toFixed(1)} to ${r.loadavg[1].toFixed(1)}` : ''} | ${fmtInt(r.bound)} | ` +
      `${fmtInt(r.np2)} | ${fmtInt(r.defaults)} | ${fmtInt(r.ws)} | ${x === undefined ? '–' : `${x.toFixed(2)}x`} | ` +
      `${r.replays.map(fmtInt).join(', ')} | ${never ? 'PASS' : '**FAIL**'} | ` +
      `${x === undefined ? '–' : `${x <= r.target ? 'PASS' : '**FAIL**'} (${r.target}x)`} |`);
  }
  return `${lines.join('\n')}\n\n`;
}

function compare(a, b) {
  const x = order(a);
  const y = order(b);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return x[i] - y[i];
  return a < b ? -1 : a > b ? 1 : 0;
}

export function writeDoc(file, sections, ctx) {
  let text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '# Benchmarks\n';
  const blocks = new Map();
  let at = text.indexOf(begin);
  let stop = text.indexOf(end);
  if (at >= 0 && stop > at) {
    const inner = text.slice(at + begin.length, stop);
    for (const m of inner.matchAll(blockRe)) blocks.set(m[1], m[2]);
  } else {
    if (!text.endsWith('\n')) text += '\n';
    text += `\n${begin}\n${end}\n`;
    at = text.indexOf(begin);
    stop = text.indexOf(end);
  }
  const measured = (command) => `Measured ${ctx.date} with \`${command}\`` +
    (command === ctx.command.replace(/ --write-doc\b/, '') ? '' : ` (part of \`${ctx.command}\`)`) +
    ` on ${ctx.cores} cores (${ctx.cpu}), ` +
    `warmslot binary sha256 ${ctx.binSha} (checkout at ${ctx.commit}), llama-server ${ctx.buildInfo}, ` +
    `model \`${ctx.model}\`; ` +
    'all rows of the table in one run, side by side';
  for (const s of sections) {
    const load = s.load ? ` (1-minute load average ${s.load[0].toFixed(1)} to ${s.load[1].toFixed(1)} during the run)` : '';
    const summary = s.summary ? `<!-- routing-summary:${JSON.stringify(s.summary)} -->\n` : '';
    blocks.set(s.key, `${measured(s.command ?? ctx.command)}${load}.\n\n${s.text.trimEnd()}\n${summary}`);
  }
  const body = [...blocks.keys()].sort(compare)
    .map((k) => `<!-- routing-run:${k}:begin -->\n${blocks.get(k)}<!-- routing-run:${k}:end -->\n`).join('\n');
  const section = `${begin}\n${intro}\n${summaryTable(blocks)}${body}${end}`;
  fs.writeFileSync(file, text.slice(0, at) + section + text.slice(stop + end.length));
}
