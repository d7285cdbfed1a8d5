// `rlm mcp` speaks both protocol eras: the 2026-07-28 revision (stateless, server/discover) and
// the 2025 session revisions.
//   - the conformance suite (conformance-2026 = @modelcontextprotocol/conformance 0.2.0-alpha.12)
//     runs the frozen requirement sets of 2026-07-28 and of 2025-11-25, with the test fixtures;
//   - the TypeScript SDK v2 client (@modelcontextprotocol/client), pinned to 2026-07-28 and left
//     on its 2025 default, calls every tool over HTTP and over stdio (rlm_* against the LLM
//     stand-in); on 2026-07-28 the stateful tools carry their sandbox by `workspace` handle.
// Run from the repository root after `make`: node --test tests/sdk/mcp_eras.test.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const path = (p) => fileURLToPath(new URL(p, import.meta.url));
const RLM = path('../../rlm');
const NODE22 = path('node_modules/node/bin/node');
const CONFORMANCE = path('node_modules/conformance-2026/dist/index.js');
const FIXTURES = path('../mcp/fixtures.lua');
const LLM_STANDIN = path('../standins/llm');
const KEY = 'sk-mcp-eras-key-0123456789';

/** Starts argv and resolves with its READY url once it prints the line. */
async function startReady(argv, env) {
  const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'], env });
  const lines = createInterface({ input: proc.stdout });
  let timer;
  const first = await Promise.race([
    new Promise((resolve) => lines.once('line', resolve)),
    new Promise((_, reject) => proc.once('exit', (code) => reject(new Error(`${argv[0]} exited with ${code}`)))),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${argv[0]} printed no READY in 60 s`)), 60000); }),
  ]).finally(() => clearTimeout(timer));
  const m = /^READY (http:\/\/127\.0\.0\.1:\d+)$/.exec(first);
  assert.ok(m, `${argv[0]} printed ${JSON.stringify(first)} instead of READY`);
  return { proc, url: m[1] };
}

function run(file, args) {
  return new Promise((resolve) => {
    execFile(file, args, { maxBuffer: 1 << 25, timeout: 900000 }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

describe('conformance requirement sets over Streamable HTTP', () => {
  let server, out;
  before(async () => {
    out = mkdtempSync(join(tmpdir(), 'rlm-eras-'));
    server = await startReady([RLM, 'mcp', '--fixtures', FIXTURES, '--http', '127.0.0.1:0']);
  });
  after(() => { server?.proc.kill('SIGTERM'); rmSync(out, { recursive: true, force: true }); });

  for (const [revision, least] of [['2026-07-28', 140], ['2025-11-25', 77]]) {
    test(`every scenario ${revision} requires passes`, async () => {
      const res = await run(NODE22, [CONFORMANCE, 'server', '--url', `${server.url}/mcp`,
                                     '--requirements', revision, '-o', join(out, revision)]);
      const summary = res.stdout.slice(res.stdout.indexOf('=== SUMMARY ==='));
      assert.equal(res.code, 0, `conformance ${revision} failed:\n${summary}\n${res.stderr}`);
      const total = /^Total: (\d+) passed, (\d+) failed/m.exec(summary);
      assert.ok(total, summary);
      assert.ok(Number(total[1]) >= least, `only ${total[1]} checks passed:\n${summary}`);
      // The scored scenarios all pass; only the not-scored ones (extension, pending) may fail.
      const notScored = new Set([...summary.matchAll(/^ {2}[✓✗] (\S+) \(/gm)].map((m) => m[1]));
      const failed = [...summary.matchAll(/^✗ (\S+):/gm)].map((m) => m[1]);
      assert.deepEqual(failed.filter((name) => !notScored.has(name)), [], summary);
    });
  }
});

// Every tool, called the way an agent would; `keep` is where the stateful tools' sandbox lives
// (a workspace handle on 2026-07-28, the session otherwise).
async function callEveryTool(client, era) {
  const call = async (name, args) => {
    const r = await client.callTool({ name, arguments: args }, { timeout: 300000 });
    assert.ok(!r.isError, `${era} ${name}: ${JSON.stringify(r.content).slice(0, 300)}`);
    return r;
  };
  const names = (await client.listTools()).tools.map((t) => t.name).sort();
  assert.deepEqual(names, ['rlm_analyze', 'rlm_code', 'rlm_decompose', 'rlm_execute', 'rlm_status',
    'sandbox_download', 'sandbox_exec', 'sandbox_exec_stateful', 'sandbox_files', 'sandbox_shell',
    'sandbox_upload']);
  const called = new Set();
  const track = async (name, args) => { called.add(name); return call(name, args); };

  assert.equal((await track('sandbox_exec', { code: 'print(6 * 7)' })).structuredContent.stdout, '42\n');
  const first = await track('sandbox_exec_stateful', { code: 'x = 5' });
  const workspace = first.structuredContent.workspace;
  if (era === '2026-07-28') assert.match(workspace ?? '', /^ws-[0-9a-f]+$/, 'a stateless call starts a workspace');
  else assert.equal(workspace, undefined, 'a session keeps its sandbox without a handle');
  const keep = workspace ? { workspace } : {};
  assert.equal((await track('sandbox_exec_stateful', { code: 'print(x + 1)', ...keep })).structuredContent.stdout, '6\n');
  await track('sandbox_upload', { path: 'notes.txt', content: 'one two three', ...keep });
  const files = (await track('sandbox_files', keep)).structuredContent.files.map((f) => f.path);
  assert.ok(files.some((p) => p.endsWith('notes.txt')), JSON.stringify(files));
  assert.equal((await track('sandbox_download', { path: 'notes.txt', ...keep })).content[0].text, 'one two three');
  assert.equal((await track('sandbox_shell', { command: 'wc -w < notes.txt', ...keep })).structuredContent.output.trim(), '3');
  assert.equal((await track('rlm_execute', { task: 'How many words?', context: 'a b c' })).content[0].text, '3');
  assert.equal((await track('rlm_analyze', { data: 'x y', question: 'How many words?' })).content[0].text, '2');
  assert.equal((await track('rlm_code', { task: 'a function that returns one' })).structuredContent.fields.code,
               'def f(): return 1');
  assert.equal((await track('rlm_decompose', { task: 'Say letters', max_subtasks: 2 })).content[0].text, 'A+B');
  const status = await track('rlm_status', {});
  assert.ok(status.structuredContent.usage.runs >= 4, JSON.stringify(status.structuredContent.usage));
  assert.deepEqual([...called].sort(), names, 'every listed tool was called');
}

describe('SDK v2 clients of both eras call every tool', () => {
  let llm, dir, env, http;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rlm-eras-llm-'));
    const script = join(dir, 'script.json');
    const code = (c) => 'Working.\n```repl\n' + c + '\n```\n';
    writeFileSync(script, JSON.stringify({
      rules: [
        { match: 'Write python code', reply: code("SUBMIT(code='def f(): return 1', test_output='ok', explanation='one')") },
        { match: 'Combine the answers', reply: code("SUBMIT(answer='+'.join(s['answer'] for s in context['subtasks']))") },
        { match: 'Split this task', reply: code("SUBMIT(subtasks=['Say A', 'Say B'])") },
        { match: 'Task: Say A', reply: code("SUBMIT(answer='A')") },
        { match: 'Task: Say B', reply: code("SUBMIT(answer='B')") },
        { match: 'Task:', reply: code('SUBMIT(answer=str(len(context.split())))') },
      ],
      default: 'I am not sure.',
    }));
    llm = await startReady(['/usr/bin/python3', LLM_STANDIN, '--port', '0', '--api-key', KEY, '--script', script]);
    env = { ...process.env, OPENAI_BASE_URL: `${llm.url}/v1`, OPENAI_API_KEY: KEY, RLM_MODEL: 'openai/test-model' };
    http = await startReady([RLM, 'mcp', '--http', '127.0.0.1:0'], env);
  });
  after(() => {
    http?.proc.kill('SIGTERM');
    llm?.proc.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  });

  // A stateless request over plain HTTP: nothing ties it to the requests before it.
  async function post(method, params, capabilities = {}) {
    const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28',
                   'io.modelcontextprotocol/clientCapabilities': capabilities };
    const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
                      'MCP-Protocol-Version': '2026-07-28', 'Mcp-Method': method };
    const name = params.name ?? params.taskId;
    if (name) headers['Mcp-Name'] = name;
    const res = await fetch(`${http.url}/mcp`, { method: 'POST', headers,
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: meta } }) });
    const text = await res.text();
    const json = res.headers.get('content-type').includes('text/event-stream')
      ? JSON.parse(text.split('\n').filter((l) => l.startsWith('data: ')).pop().slice(6)) : JSON.parse(text);
    return { status: res.status, ...json };
  }

  test('an rlm_* run is a task for a client that takes tasks; its result is read later', async () => {
    const tasks = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
    const created = await post('tools/call', { name: 'rlm_execute',
      arguments: { task: 'How many words?', context: 'one two three four' } }, tasks);
    assert.equal(created.result?.resultType, 'task', JSON.stringify(created));
    const id = created.result.taskId;
    assert.match(id, /^task-[0-9a-f]+$/);
    assert.equal(created.result.content, undefined, 'the handle comes before the answer');
    let task;
    const deadline = Date.now() + 120000;
    do {
      task = (await post('tasks/get', { taskId: id }, tasks)).result;
      if (task.status === 'working') await new Promise((r) => setTimeout(r, 100));
    } while (task.status === 'working' && Date.now() < deadline);
    assert.equal(task.status, 'completed', JSON.stringify(task));
    assert.equal(task.result.content[0].text, '4');
    assert.equal(task.result.structuredContent.reason, 'submitted');
    // read again: a finished task stays readable
    assert.equal((await post('tasks/get', { taskId: id }, tasks)).result.result.content[0].text, '4');
    // without the extension the same run answers in place, and tasks/* are refused
    const direct = await post('tools/call', { name: 'rlm_execute', arguments: { task: 'How many words?', context: 'a b' } });
    assert.equal(direct.result.resultType, 'complete');
    assert.equal(direct.result.content[0].text, '2');
    const refused = await post('tasks/get', { taskId: id });
    assert.equal(refused.error.code, -32021);
    assert.equal(refused.status, 400);
    const unknown = await post('tasks/get', { taskId: 'task-0000' }, tasks);
    assert.equal(unknown.error.code, -32602);
  });

  const eras = [['2026-07-28', { pin: '2026-07-28' }, 'modern'], ['2025-11-25', 'legacy', 'legacy']];
  for (const [era, mode, expected] of eras) {
    for (const transport of ['http', 'stdio']) {
      test(`a client pinned to ${era} over ${transport}`, async () => {
        const client = new Client({ name: `eras-${era}`, version: '1.0.0' }, { versionNegotiation: { mode } });
        await client.connect(transport === 'http'
          ? new StreamableHTTPClientTransport(new URL(`${http.url}/mcp`))
          : new StdioClientTransport({ command: RLM, args: ['mcp'], env, stderr: 'inherit' }));
        try {
          assert.equal(client.getProtocolEra(), expected);
          assert.equal(client.getNegotiatedProtocolVersion(), era);
          assert.equal(client.getServerVersion()?.name, 'rlm');
          await callEveryTool(client, era);
        } finally {
          await client.close();
        }
      });
    }
  }
});
