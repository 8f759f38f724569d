// The routing benchmark's workloads and configurations: seeded request sequences that every
// configuration replays identically.
import { makeDocument, rng } from '../../integration/lib/text.mjs';

// Sizes per preset. `tiny` is the fast default; `bench` runs the larger model, which prefills
// about 220 tokens/s on 2 cores, so its documents are short and its workloads small.
const sizes = {
  tiny: {
    interleaved: { docs: 4, docBytes: 8100, questions: 10, chats: 20 },
    docqa: { docs: 3, docBytes: 6000, questions: 10 },
    messages: { docs: 3, docBytes: 6000, questions: 10 },
    replicas: { docs: 6, docBytes: 5000, questions: 5 },
    restart: { docs: 3, docBytes: 6000, questions: 2 },
  },
  bench: {
    interleaved: { docs: 4, docBytes: 2000, questions: 3, chats: 6 },
    docqa: { docs: 3, docBytes: 2000, questions: 4 },
    messages: { docs: 3, docBytes: 2000, questions: 4 },
    replicas: { docs: 6, docBytes: 1500, questions: 3 },
    restart: { docs: 2, docBytes: 2000, questions: 2 },
  },
};

// The host-RAM cache that holds as many tokens as llama-server's default 8 GiB holds for an 8B
// model (about 128 KB per token: some 64K tokens): the tiny model keeps about 1 KB per token,
// the bench model (8 layers of 1,024) about 32 KB.
const cacheRamLikeDefault = { tiny: 64, bench: 2048 };

export const workloadNames = ['interleaved', 'docqa', 'messages', 'replicas', 'restart'];
// With the coding-agent workload and the long-document one, which have their own runners
// (lib/agent.mjs, lib/long.mjs).
export const allWorkloadNames = [...workloadNames, 'agent', 'long'];

// The model name the restart workload's requests and warm-ups carry: a warm-up's prefix is
// keyed by the request's fields, "model" included (api/admin.hpp).
export const restartModel = 'bench';

const topics = ['harbour', 'lantern', 'orchard', 'meadow', 'quarry', 'violin', 'ledger', 'compass',
  'river', 'mountain', 'third paragraph', 'opening lines', 'last section', 'numbers', 'people'];
const asks = ['What does the text say about the', 'Summarise in one line the part about the',
  'Quote the sentence that mentions the', 'Is there anything unusual about the',
  'List two facts about the', 'Explain briefly the role of the'];
const shortSystems = ['You are a helpful assistant.', 'You are terse.', 'Answer in one word.',
  'You are a friendly assistant who answers briefly.'];
const shortQuestions = ['What is the capital of France?', 'Say hello.', 'How many legs has a spider?',
  'Name a colour.', 'What is two plus two?', 'Give me a synonym for quick.', 'What day follows Monday?',
  'Spell cat backwards.', 'Is water wet?', 'Name a prime number.', 'What is the opposite of cold?',
  'Tell me a fruit.', 'Which is larger, 7 or 9?', 'Translate yes into French.', 'Name an ocean.',
  'What rhymes with moon?', 'Count to three.', 'Name a planet.', 'What colour is the sky?',
  'Give a word that starts with z.'];

function shuffle(list, r) {
  for (let i = list.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [list[i], list[j]] = [list[j], list[i]];
  }
  return list;
}

// `questions` questions on each of `docs` (system prompts), shuffled with `r`; `first` numbers
// the first question (so that a later batch asks new ones).
export function docRequests(r, docs, questions, first = 0) {
  const list = [];
  docs.forEach((system, d) => {
    for (let q = first; q < first + questions; q++) {
      const question = `Question ${q + 1} on document ${d + 1}: ${asks[Math.floor(r() * asks.length)]} ` +
        `${topics[Math.floor(r() * topics.length)]}?`;
      list.push({ kind: 'doc', key: `doc${d + 1}`, system, question });
    }
  });
  return shuffle(list, r);
}

// A workload: { name, title, describe, replicas, slots, requests: [{kind, key, system, question}],
// configs: [...] }. `key` names the system part: requests with the same key share it.
export function buildWorkload(name, preset = 'tiny', { seed = 1, extraConfigs = false } = {}) {
  const s = sizes[preset]?.[name];
  if (!s) throw new Error(`unknown workload ${name} or preset ${preset}`);
  const r = rng(seed * 7919 + name.length * 104729);
  const docs = Array.from({ length: s.docs }, (_, i) => makeDocument(1000 * seed + 10 * name.length + i, s.docBytes));
  let requests = docRequests(r, docs, s.questions);
  if (name === 'interleaved') {
    for (let c = 0; c < s.chats; c++) {
      const at = Math.floor(r() * (requests.length + 1));
      const sys = shortSystems[Math.floor(r() * shortSystems.length)];
      requests = [...requests.slice(0, at),
        { kind: 'chat', key: `short:${sys}`, system: sys, question: shortQuestions[c % shortQuestions.length] },
        ...requests.slice(at)];
    }
  }
  const replicas = name === 'replicas' ? 2 : 1;
  const restart = name === 'restart';
  const described = {
    interleaved: `${s.docs} system prompts of about ${s.docBytes.toLocaleString('en-US')} bytes, ${s.questions} questions each, ` +
      `${s.chats} short unrelated chats at random positions; one llama-server with 2 slots`,
    docqa: `${s.docs} documents of about ${s.docBytes.toLocaleString('en-US')} bytes, ${s.questions} questions each; one llama-server with 2 slots`,
    messages: `${s.docs} documents of about ${s.docBytes.toLocaleString('en-US')} bytes, ${s.questions} questions each, ` +
      'the same requests over OpenAI chat completions and over Anthropic Messages (`/v1/messages`, which ' +
      'llama-server cannot pin to a slot: warmslot predicts its choice); one llama-server with 2 slots',
    replicas: `${s.docs} documents of about ${s.docBytes.toLocaleString('en-US')} bytes, ${s.questions} questions each; two llama-server ` +
      'processes with 2 slots each (without warmslot: the client spreads requests round-robin over both)',
    restart: `${s.docs} documents of about ${s.docBytes.toLocaleString('en-US')} bytes warmed (through warmslot: ` +
      '`POST /admin/warm`, the call behind `warmslot warm`; llama-server alone: one question per document), ' +
      `then the llama-server process restarted, then ${s.questions} questions per document replayed and counted; ` +
      'one llama-server with 2 slots; warmslot with `cache.min_prefix_tokens: 512`',
  }[name];
  return { name, preset, describe: described, replicas, requests, restart, docs: restart ? docs : [],
    model: restart ? restartModel : undefined, configs: configsFor(name, preset, extraConfigs) };
}

// Configurations. `slots: 0` is llama-server with its own defaults (no -np: 4 unified slots).
export function configsFor(name, preset = 'tiny', extraConfigs = false) {
  const ram = String(cacheRamLikeDefault[preset]);
  if (name === 'restart') {
    // Only the disk survives a restart: every llama-server RAM setting loses the documents alike.
    return [
      { id: 'np2', label: 'llama-server -np 2 (default --cache-ram)', slots: 2, extra: [], warmslot: false },
      { id: 'ws', label: '**warmslot** + llama-server -np 2, slot files in --slot-save-path', slots: 2, extra: [], warmslot: true },
    ];
  }
  if (name === 'messages') {
    return [
      { id: 'np2', label: 'llama-server -np 2 (default --cache-ram), chat completions', slots: 2, extra: [], warmslot: false },
      { id: 'np2m', label: 'llama-server -np 2 (default --cache-ram), Messages', slots: 2, extra: [], warmslot: false, api: 'messages' },
      { id: 'ws', label: '**warmslot** + llama-server -np 2, chat completions', slots: 2, extra: [], warmslot: true },
      { id: 'wsm', label: '**warmslot** + llama-server -np 2, Messages', slots: 2, extra: [], warmslot: true, api: 'messages' },
    ];
  }
  const list = [
    { id: 'np2', label: 'llama-server -np 2 (default --cache-ram)', slots: 2, extra: [], warmslot: false },
    { id: 'defaults', label: 'llama-server, all defaults (no -np: 4 unified slots)', slots: 0, extra: [], warmslot: false },
    { id: 'ram0', label: 'llama-server -np 2 --cache-ram 0', slots: 2, extra: ['--cache-ram', '0'], warmslot: false },
  ];
  if (name !== 'replicas') {
    list.push({ id: 'ram64', label: `llama-server -np 2 --cache-ram ${ram}`, slots: 2, extra: ['--cache-ram', ram], warmslot: false });
  }
  list.push({ id: 'ws', label: '**warmslot** + llama-server -np 2', slots: 2, extra: [], warmslot: true });
  if (name !== 'replicas') {
    list.push({ id: 'ws64', label: `**warmslot** + llama-server -np 2 --cache-ram ${ram}`, slots: 2, extra: ['--cache-ram', ram], warmslot: true });
  }
  if (extraConfigs) {
    list.push({ id: 'ws0', label: '**warmslot** + llama-server -np 2 --cache-ram 0', slots: 2, extra: ['--cache-ram', '0'], warmslot: true });
  }
  return list;
}
