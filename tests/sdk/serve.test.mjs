// `rlm serve`: the official OpenAI client (pinned in package.json) runs RLM runs through rlm's
// OpenAI-compatible endpoint, streamed and not, and gets the answer and the whole tree's usage.
// The runs' own models are tests/standins/llm.
// Run from the repository root after `make`: node --test tests/sdk/serve.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';

const RLM = fileURLToPath(new URL('../../rlm', import.meta.url));
const STANDIN = fileURLToPath(new URL('../standins/llm', import.meta.url));
const MODEL_KEY = 'sk-model-key-0123456789';
const SERVE_TOKEN = 'serve-token-abcdef0123456789';

const code = (src) => 'Working.\n```repl\n' + src + '\n```\n';
const SCRIPT = {
  rules: [
    { match: '^(red|blue)$', reply_expr: "prompt.upper()" },
    { match: 'Task: colours', reply: code("r = llm_query_batched(['red', 'blue'])\nprint(r)") },
    { match: 'Task: file', reply: code("SUBMIT(answer=str(len(context)) + ' ' + context[:5])") },
    { match: 'Task: history', reply: code("SUBMIT(answer='yes' if 'earlier words' in context else 'no')") },
    { match: 'Turn 2 of', reply: code("SUBMIT(answer=' and '.join(r))") },
  ],
};

let dir, model, rlm, client;
const procs = [];

async function start(argv, env) {
  const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'], env });
  procs.push(proc);
  let timer;
  const first = await Promise.race([
    new Promise((resolve) => createInterface({ input: proc.stdout }).once('line', resolve)),
    new Promise((_, reject) => proc.once('exit', (c) => reject(new Error(`${argv[0]} exited with ${c}`)))),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('no READY in 60 s')), 60000); }),
  ]).finally(() => clearTimeout(timer));
  const m = /^READY (http:\/\/127\.0\.0\.1:\d+)$/.exec(first);
  assert.ok(m, `${argv[0]} printed ${JSON.stringify(first)}`);
  return m[1];
}

async function stats() {
  return (await fetch(model + '/_stats')).json();
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'rlm-serve-'));
  writeFileSync(join(dir, 'script.json'), JSON.stringify(SCRIPT));
  model = await start(['/usr/bin/python3', STANDIN, '--port', '0', '--api-key', MODEL_KEY,
                       '--script', join(dir, 'script.json')], process.env);
  writeFileSync(join(dir, 'config.lua'), 'return {["rlm-small"] = {model = "openai/root-model", max_iterations = 5}}\n');
  const env = { ...process.env, OPENAI_BASE_URL: model + '/v1', OPENAI_API_KEY: MODEL_KEY,
                RLM_MODEL: 'openai/root-model', RLM_SERVE_TOKEN: SERVE_TOKEN };
  const url = await start([RLM, 'serve', '--http', '127.0.0.1:0', '--sub-model', 'openai/sub-model',
                           '--config', join(dir, 'config.lua')], env);
  client = new OpenAI({ apiKey: SERVE_TOKEN, baseURL: url + '/v1', maxRetries: 0, timeout: 300000 });
});

after(() => {
  for (const p of procs) p.kill('SIGTERM');
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('the models are the configurations, in name order', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ['rlm', 'rlm-small']);
});

test('a completion is a run: the answer, and the usage of every call in the tree', async () => {
  await fetch(model + '/_reset', { method: 'POST' });
  const r = await client.chat.completions.create({ model: 'rlm', messages: [{ role: 'user', content: 'colours' }] });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, 'RED and BLUE');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await stats();
  assert.equal(s.requests, 4, 'two turns and two sub-calls');
  assert.equal(r.usage.prompt_tokens, s.input_tokens, 'every input token the model server counted');
  assert.equal(r.usage.completion_tokens, s.output_tokens);
  assert.equal(r.usage.total_tokens, s.input_tokens + s.output_tokens);
});

test('streamed: progress as reasoning_content, then the answer, then the usage', async () => {
  await fetch(model + '/_reset', { method: 'POST' });
  const stream = await client.chat.completions.create({
    model: 'rlm', stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'colours' }],
  });
  let content = '', progress = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      content += c.delta?.content ?? '';
      progress += c.delta?.reasoning_content ?? '';
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(content, 'RED and BLUE');
  assert.equal(finish, 'stop');
  assert.match(progress, /^turn 1 of at most \d+: \d+ tokens, 2 sub-calls/m);
  assert.ok(usage, 'a usage chunk with include_usage');
  assert.equal(usage.prompt_tokens, (await stats()).input_tokens);
});

test('attached files and earlier messages are the context', async () => {
  const data = Buffer.from('hello file bytes').toString('base64');
  const r = await client.chat.completions.create({ model: 'rlm-small', messages: [{ role: 'user', content: [
    { type: 'text', text: 'file' },
    { type: 'file', file: { filename: 'a.txt', file_data: `data:text/plain;base64,${data}` } },
  ] }] });
  assert.equal(r.choices[0].message.content, '16 hello');
  const h = await client.chat.completions.create({ model: 'rlm', messages: [
    { role: 'user', content: 'remember these earlier words' },
    { role: 'assistant', content: 'noted' },
    { role: 'user', content: 'history' },
  ] });
  assert.equal(h.choices[0].message.content, 'yes');
});

test('a wrong key is 401, an unknown model 404, a bad body 400: the client raises each', async () => {
  const wrong = new OpenAI({ apiKey: 'not-the-token', baseURL: client.baseURL, maxRetries: 0 });
  await assert.rejects(wrong.chat.completions.create({ model: 'rlm', messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(client.chat.completions.create({ model: 'gpt-9', messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e instanceof OpenAI.NotFoundError && /rlm, rlm-small/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model: 'rlm', messages: [{ role: 'assistant', content: 'x' }] }),
                       (e) => e instanceof OpenAI.BadRequestError && /last message must be the user's task/.test(e.message));
});
