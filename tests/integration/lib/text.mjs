// Deterministic test documents: seeded pseudo-random prose, about one token per byte on the
// generated models' byte-level vocabulary.
const words = ('the of and to in is that for it as was with be by on not he this are or his from at ' +
  'which but have an they you were her she there been one all we their has would when if so no ' +
  'cache slot prefix document model server token prompt memory state question answer reading ' +
  'river mountain harbour lantern orchard meadow quarry violin ledger compass').split(' ');

export function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return s / 4294967296;
  };
}

// About `bytes` bytes of text in lines of 60-100 characters.
export function makeDocument(seed, bytes) {
  const r = rng(seed);
  const lines = [];
  let size = 0;
  let n = 1;
  while (size < bytes) {
    const target = 60 + Math.floor(r() * 40);
    let line = `${seed}.${n++}`;
    while (line.length < target) line += ' ' + words[Math.floor(r() * words.length)];
    lines.push(line + '.');
    size += line.length + 2;
  }
  return lines.join('\n');
}

// The same document with one line inserted in its middle; returns the byte offset too.
export function insertLineInMiddle(doc, line) {
  const mid = doc.indexOf('\n', Math.floor(doc.length / 2)) + 1;
  return { text: doc.slice(0, mid) + line + '\n' + doc.slice(mid), offset: mid };
}

export function chat(system, question, extra = {}) {
  return {
    messages: [{ role: 'system', content: system }, { role: 'user', content: question }],
    max_tokens: 4, temperature: 0, seed: 42, ...extra,
  };
}
