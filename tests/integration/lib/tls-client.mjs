// The openai client over HTTPS, in a process of its own: Node reads NODE_EXTRA_CA_CERTS (the
// test's self-signed certificate) only at start. Usage: node tls-client.mjs BASE_URL API_KEY.
// Prints one JSON line: what a plain and a streamed chat completion came back with.
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hi.' }];
const { data, response } = await client.chat.completions
  .create({ model: 'm', messages, max_tokens: 4, temperature: 0 })
  .withResponse();
let chunks = 0;
let finish = null;
const stream = await client.chat.completions.create({ model: 'm', messages, max_tokens: 4, temperature: 0, stream: true });
for await (const chunk of stream) {
  chunks += 1;
  finish = chunk.choices?.[0]?.finish_reason ?? finish;
}
console.log(JSON.stringify({
  object: data.object,
  content: data.choices[0].message.content,
  backend: response.headers.get('x-warmslot-backend'),
  chunks,
  finish,
}));
