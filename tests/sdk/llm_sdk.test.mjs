// Fidelity: the official OpenAI and Anthropic SDKs (pinned in package.json) against tests/standins/llm.
// If these clients accept the stand-in's bodies, streams, errors and retry hints, tests that use the
// stand-in exercise the same wire formats rlm meets in production.
// Run from the repository root: node --test tests/sdk/llm_sdk.test.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const STANDIN = fileURLToPath(new URL('../standins/llm', import.meta.url));
const KEY = 'sk-fidelity-secret';

const SCRIPT = {
  rules: [
    { match: '^retry-', fault: '429', retry_after: 1, times: 1, reply: 'after retry' },
    { match: '^stop-test', reply: 'alpha beta END gamma' },
    { match: '^long', reply: 'one two three four five six seven eight nine ten' },
    { match: '^cut', fault: 'cut' },
    { match: '^malformed', fault: 'malformed' },
    { reply_expr: "'you said: ' + prompt" },
  ],
};

/** The stand-in's documented token estimate: one per 4 characters, at least 1. */
const tok = (chars) => Math.max(1, Math.ceil(chars / 4));

let server, base, dir;

async function startServer() {
  dir = mkdtempSync(join(tmpdir(), 'llm-sdk-'));
  const script = join(dir, 'script.json');
  writeFileSync(script, JSON.stringify(SCRIPT));
  const proc = spawn('/usr/bin/python3', [STANDIN, '--port', '0', '--api-key', KEY, '--script', script],
                     { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: proc.stdout });
  let timer;
  const first = await Promise.race([
    new Promise((resolve) => lines.once('line', resolve)),
    new Promise((_, reject) => proc.once('exit', (code) => reject(new Error(`stand-in exited with ${code}`)))),
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error('stand-in did not print READY in 60 s')), 60000);
    }),
  ]).finally(() => clearTimeout(timer));
  const m = /^READY (http:\/\/127\.0\.0\.1:\d+)$/.exec(first);
  assert.ok(m, `stand-in printed ${JSON.stringify(first)} instead of READY`);
  return { proc, url: m[1] };
}

async function control(path, body) {
  const res = await fetch(base + path, body === undefined ? {} : { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, `${path} answered ${res.status}`);
  return res.json();
}

const openai = (opts = {}) => new OpenAI({ apiKey: KEY, baseURL: `${base}/v1`, maxRetries: 0, ...opts });
const anthropic = (opts = {}) => new Anthropic({ apiKey: KEY, baseURL: base, maxRetries: 0, ...opts });

before(async () => {
  ({ proc: server, url: base } = await startServer());
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.once('exit', resolve));
    server.kill('SIGTERM');
    await exited;
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('OpenAI SDK', () => {
  test('non-streaming completion: text, finish_reason, usage', async () => {
    const system = 'You are terse.';
    const prompt = 'hello openai';
    const res = await openai().chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'system', content: system }, { role: 'user', content: prompt }],
    });
    const reply = `you said: ${prompt}`;
    assert.equal(res.object, 'chat.completion');
    assert.equal(res.model, 'gpt-4o-mini');
    assert.match(res.id, /^chatcmpl-/);
    assert.equal(res.choices.length, 1);
    assert.equal(res.choices[0].message.role, 'assistant');
    assert.equal(res.choices[0].message.content, reply);
    assert.equal(res.choices[0].finish_reason, 'stop');
    assert.deepEqual(
      [res.usage.prompt_tokens, res.usage.completion_tokens, res.usage.total_tokens],
      [tok(system.length + prompt.length), tok(reply.length), tok(system.length + prompt.length) + tok(reply.length)],
    );
  });

  test('streaming completion: role first, a delta per word, finish chunk, usage chunk', async () => {
    const stream = await openai().chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'long story please' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const reply = 'one two three four five six seven eight nine ten';
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const pieces = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content).filter((t) => t));
    // one event per word, each once and in order (what the SDK parses, not how TCP cut it)
    assert.deepEqual(pieces, reply.split(/(?<= )/));
    const finishes = chunks.flatMap((c) => c.choices.map((ch) => ch.finish_reason)).filter((r) => r);
    assert.deepEqual(finishes, ['stop']);
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, tok(reply.length));
    assert.equal(last.usage.prompt_tokens, tok('long story please'.length));
  });

  test('the stream helper accumulates the same completion', async () => {
    const final = await openai().chat.completions
      .stream({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'long' }] })
      .finalChatCompletion();
    assert.equal(final.choices[0].message.content, 'one two three four five six seven eight nine ten');
    assert.equal(final.choices[0].finish_reason, 'stop');
  });

  test('stop sequence cuts the reply; max_tokens cuts with finish_reason length', async () => {
    const client = openai();
    const stopped = await client.chat.completions.create({
      model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'stop-test' }], stop: ['END'],
    });
    assert.equal(stopped.choices[0].message.content, 'alpha beta ');
    assert.equal(stopped.choices[0].finish_reason, 'stop');
    const limited = await client.chat.completions.create({
      model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'long' }], max_completion_tokens: 2,
    });
    assert.equal(limited.choices[0].message.content, 'one two ');
    assert.equal(limited.choices[0].finish_reason, 'length');
    assert.equal(limited.usage.completion_tokens, 2);
  });

  test('a wrong key is an AuthenticationError', async () => {
    const err = await openai({ apiKey: 'sk-wrong' }).chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] })
      .then(() => null, (e) => e);
    assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err}`);
    assert.equal(err.status, 401);
    assert.equal(err.code, 'invalid_api_key');
    assert.ok(!String(err.message).includes('sk-wrong'), 'the key leaks into the error');
  });

  test('429 with Retry-After is retried and then succeeds', async () => {
    await control('/_reset', {});
    const t0 = performance.now();
    const res = await openai({ maxRetries: 2 }).chat.completions.create({
      model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'retry-openai' }],
    });
    const waited = performance.now() - t0;
    assert.equal(res.choices[0].message.content, 'after retry');
    assert.ok(waited >= 950, `the SDK retried after ${waited.toFixed(0)} ms, ignoring Retry-After: 1`);
    const stats = await control('/_stats');
    assert.equal(stats.paths['/v1/chat/completions'], 2);
  });

  test('a cut stream and a malformed body surface as errors', async () => {
    const client = openai();
    const stream = await client.chat.completions.create({
      model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'cut' }], stream: true,
    });
    await assert.rejects(async () => { for await (const _ of stream) { /* drain */ } });
    await assert.rejects(client.chat.completions.create({
      model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'malformed' }],
    }));
  });
});

describe('OpenAI SDK, Responses API', () => {
  test('non-streaming response: output_text, status, usage; a limit makes it incomplete', async () => {
    const instructions = 'You are terse.';
    const input = 'hello responses';
    const res = await openai().responses.create({ model: 'o3-pro', instructions, input,
                                                  reasoning: { effort: 'low' } });
    const reply = `you said: ${input}`;
    assert.equal(res.object, 'response');
    assert.equal(res.status, 'completed');
    assert.equal(res.output_text, reply);
    assert.deepEqual(res.output.map((item) => item.type), ['reasoning', 'message']);
    assert.deepEqual([res.usage.input_tokens, res.usage.output_tokens],
                     [tok(instructions.length + input.length), tok(reply.length)]);
    const cut = await openai().responses.create({ model: 'o3-pro', input: 'long', max_output_tokens: 2 });
    assert.equal(cut.status, 'incomplete');
    assert.equal(cut.incomplete_details.reason, 'max_output_tokens');
  });

  test('the stream helper builds the same response from the events', async () => {
    const stream = openai().responses.stream({ model: 'o3-pro', input: 'long story please' });
    const deltas = [];
    stream.on('response.output_text.delta', (e) => deltas.push(e.delta));
    const res = await stream.finalResponse();
    assert.equal(res.output_text, 'one two three four five six seven eight nine ten');
    assert.equal(deltas.join(''), res.output_text);
    assert.ok(deltas.length > 1, 'several deltas');
    assert.equal(res.status, 'completed');
  });
});

describe('Anthropic SDK', () => {
  test('non-streaming message: text, stop_reason, usage', async () => {
    const system = 'You are terse.';
    const prompt = 'hello anthropic';
    const msg = await anthropic().messages.create({
      model: 'claude-standin', max_tokens: 1024, system,
      messages: [{ role: 'user', content: [{ type: 'text', text: prompt }] }],
    });
    const reply = `you said: ${prompt}`;
    assert.equal(msg.type, 'message');
    assert.equal(msg.role, 'assistant');
    assert.match(msg.id, /^msg_/);
    assert.deepEqual(msg.content, [{ type: 'text', text: reply }]);
    assert.equal(msg.stop_reason, 'end_turn');
    assert.equal(msg.stop_sequence, null);
    assert.equal(msg.usage.input_tokens, tok(system.length + prompt.length));
    assert.equal(msg.usage.output_tokens, tok(reply.length));
  });

  test('streaming message: a text delta per word, final message with stop_reason and usage', async () => {
    const stream = anthropic().messages.stream({
      model: 'claude-standin', max_tokens: 1024, messages: [{ role: 'user', content: 'long' }],
    });
    const pieces = [];
    const events = [];
    stream.on('text', (t) => pieces.push(t));
    stream.on('streamEvent', (e) => events.push(e.type));
    const msg = await stream.finalMessage();
    const reply = 'one two three four five six seven eight nine ten';
    assert.deepEqual(pieces, reply.split(/(?<= )/), 'one text event per word, in order');
    assert.deepEqual(msg.content, [{ type: 'text', text: reply }]);
    assert.equal(msg.stop_reason, 'end_turn');
    assert.equal(msg.usage.output_tokens, tok(reply.length));
    assert.equal(msg.usage.input_tokens, tok('long'.length));
    assert.equal(events[0], 'message_start');
    assert.equal(events.at(-1), 'message_stop');
  });

  test('stop_sequences end with stop_sequence; max_tokens with max_tokens', async () => {
    const client = anthropic();
    const stopped = await client.messages.create({
      model: 'claude-standin', max_tokens: 1024, stop_sequences: ['END'],
      messages: [{ role: 'user', content: 'stop-test' }],
    });
    assert.equal(stopped.content[0].text, 'alpha beta ');
    assert.equal(stopped.stop_reason, 'stop_sequence');
    assert.equal(stopped.stop_sequence, 'END');
    const streamed = await client.messages.stream({
      model: 'claude-standin', max_tokens: 1024, stop_sequences: ['beta'],
      messages: [{ role: 'user', content: 'stop-test' }],
    }).finalMessage();
    assert.equal(streamed.content[0].text, 'alpha ');
    assert.equal(streamed.stop_reason, 'stop_sequence');
    assert.equal(streamed.stop_sequence, 'beta');
    const limited = await client.messages.stream({
      model: 'claude-standin', max_tokens: 2, messages: [{ role: 'user', content: 'long' }],
    }).finalMessage();
    assert.equal(limited.content[0].text, 'one two ');
    assert.equal(limited.stop_reason, 'max_tokens');
    assert.equal(limited.usage.output_tokens, 2);
  });

  test('a wrong key is an AuthenticationError', async () => {
    const err = await anthropic({ apiKey: 'sk-wrong' }).messages
      .create({ model: 'claude-standin', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
      .then(() => null, (e) => e);
    assert.ok(err instanceof Anthropic.AuthenticationError, `got ${err}`);
    assert.equal(err.status, 401);
    assert.equal(err.error?.error?.type, 'authentication_error');
  });

  test('429 with Retry-After is retried and then succeeds', async () => {
    await control('/_reset', {});
    const t0 = performance.now();
    const msg = await anthropic({ maxRetries: 2 }).messages.create({
      model: 'claude-standin', max_tokens: 10, messages: [{ role: 'user', content: 'retry-anthropic' }],
    });
    const waited = performance.now() - t0;
    assert.equal(msg.content[0].text, 'after retry');
    assert.ok(waited >= 950, `the SDK retried after ${waited.toFixed(0)} ms, ignoring Retry-After: 1`);
    const stats = await control('/_stats');
    assert.equal(stats.paths['/v1/messages'], 2);
  });

  test('an injected 529 is an overloaded error the SDK retries', async () => {
    await control('/_fault', { path: '/v1/messages', status: 529, count: 1, retry_after: 0 });
    const msg = await anthropic({ maxRetries: 1 }).messages.create({
      model: 'claude-standin', max_tokens: 100, messages: [{ role: 'user', content: 'again' }],
    });
    assert.equal(msg.content[0].text, 'you said: again');
  });
});

describe('wire details the SDKs hide', () => {
  test('missing anthropic-version is a 400 in Anthropic error shape', async () => {
    const res = await fetch(`${base}/v1/messages`, {
      method: 'POST', headers: { 'x-api-key': KEY, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }),
    });
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.equal(body.type, 'error');
    assert.equal(body.error.type, 'invalid_request_error');
    assert.match(body.error.message, /anthropic-version/);
  });

  test('stats hide the key and list the models asked for', async () => {
    await control('/_reset', {});
    await openai().chat.completions.create({ model: 'model-a', messages: [{ role: 'user', content: 'a' }] });
    await anthropic().messages.create({ model: 'model-b', max_tokens: 5, messages: [{ role: 'user', content: 'b' }] });
    const res = await fetch(`${base}/_stats`);
    const text = await res.text();
    assert.ok(!text.includes(KEY), 'the api key appears in /_stats');
    const stats = JSON.parse(text);
    assert.equal(stats.requests, 2);
    assert.deepEqual(stats.models, ['model-a', 'model-b']);
    assert.equal(stats.last_headers.authorization, '***');   // the SDK sends its key as Bearer
    assert.equal(stats.last_body.messages[0].content, 'b');
  });
});
