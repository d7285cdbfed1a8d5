// `rlm mcp` against the official MCP tools (pinned in package.json):
//   - the conformance suite (@modelcontextprotocol/conformance, Node 22 from the npm package `node`)
//     over Streamable HTTP, with the test-only fixtures, every server scenario; the few that cannot
//     apply are listed with reasons in tests/mcp/expected-failures.yml;
//   - the inspector CLI over stdio: tools/list, sandbox_exec, and rlm_execute against the LLM stand-in.
// Run from the repository root after `make`: node --test tests/sdk/mcp.test.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const path = (p) => fileURLToPath(new URL(p, import.meta.url));
const RLM = path('../../rlm');
const SDK = path('.');
const NODE22 = path('node_modules/node/bin/node');
const CONFORMANCE = path('node_modules/@modelcontextprotocol/conformance/dist/index.js');
const INSPECTOR = path('node_modules/.bin/mcp-inspector-cli');
const BASELINE = path('../mcp/expected-failures.yml');
const FIXTURES = path('../mcp/fixtures.lua');
const LLM_STANDIN = path('../standins/llm');
const KEY = 'sk-mcp-test-key-0123456789';

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

function run(file, args, opts) {
  return new Promise((resolve) => {
    execFile(file, args, { maxBuffer: 1 << 24, timeout: 120000, ...opts }, (err, stdout, stderr) => {
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

describe('conformance suite over Streamable HTTP', () => {
  let server, out;
  before(async () => {
    out = mkdtempSync(join(tmpdir(), 'rlm-conformance-'));
    server = await startReady([RLM, 'mcp', '--fixtures', FIXTURES, '--http', '127.0.0.1:0']);
  });
  after(() => { server?.proc.kill('SIGTERM'); rmSync(out, { recursive: true, force: true }); });

  test('every server scenario passes, apart from the listed expected failures', async () => {
    const res = await run(NODE22, [CONFORMANCE, 'server', '--url', `${server.url}/mcp`, '--suite', 'all',
                                   '--expected-failures', BASELINE, '-o', out]);
    const summary = res.stdout.slice(res.stdout.indexOf('=== SUMMARY ==='));
    assert.equal(res.code, 0, `conformance failed:\n${summary}\n${res.stderr}`);
    assert.match(summary, /Baseline check passed: all failures are expected/);
    const passed = summary.match(/^✓ /gm) ?? [];
    assert.ok(passed.length >= 31, `only ${passed.length} scenarios passed:\n${summary}`);
    assert.match(summary, /✓ dns-rebinding-protection: 2 passed, 0 failed/);
    assert.match(summary, /✓ tools-call-elicitation: 1 passed, 0 failed/);
  });
});

describe('official SDK client over stdio: big results', () => {
  let client;
  before(async () => {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
    client = new Client({ name: 'rlm-test', version: '1.0.0' });
    await client.connect(new StdioClientTransport({ command: RLM, args: ['mcp'], stderr: 'inherit' }));
  });
  after(async () => { await client?.close(); });

  test('a 20 MB download comes in parts, the session survives and the next call works', async () => {
    const made = await client.callTool({ name: 'sandbox_exec_stateful', arguments: {
      code: "import hashlib, os\ndata = os.urandom(20 * 1024 * 1024)\n" +
            "open('big.bin', 'wb').write(data)\nprint(hashlib.sha256(data).hexdigest())" } });
    const want = made.content[0].text.trim();
    const parts = [];
    let offset = 0, calls = 0;
    for (;;) {
      const res = await client.callTool({ name: 'sandbox_download', arguments: { path: 'big.bin', offset } });
      assert.equal(res.isError, undefined, res.content[0].text.slice(0, 200));
      const meta = res.structuredContent;
      assert.equal(meta.encoding, 'base64');
      assert.equal(meta.content, undefined, 'the payload is not sent twice');
      parts.push(Buffer.from(res.content[0].text, 'base64'));
      calls++;
      if (meta.next_offset === undefined) break;
      assert.match(res.content[1].text, /call sandbox_download with offset=\d+ for the rest/);
      offset = meta.next_offset;
    }
    const { createHash } = await import('node:crypto');
    assert.equal(createHash('sha256').update(Buffer.concat(parts)).digest('hex'), want);
    assert.ok(calls >= 5, `${calls} parts`);
    // a result that cannot fit in one message: kept as a file in the sandbox, not a dead session
    const huge = await client.callTool({ name: 'sandbox_exec_stateful',
      arguments: { code: "SUBMIT(answer='x' * (12 * 1024 * 1024))" } });
    assert.equal(huge.isError, undefined);
    assert.match(huge.content[0].text, /saved in the sandbox as results\/sandbox_exec_stateful-/);
    assert.ok(huge.structuredContent.saved_bytes > 12 * 1024 * 1024, JSON.stringify(huge.structuredContent));
    const kept = await client.callTool({ name: 'sandbox_shell',
      arguments: { command: `grep -o x ${huge.structuredContent.saved_to} | wc -l` } });
    assert.equal(kept.structuredContent.output.trim(), String(12 * 1024 * 1024));
    const next = await client.callTool({ name: 'sandbox_shell', arguments: { command: 'echo alive' } });
    assert.equal(next.structuredContent.output, 'alive\n');
  });
});

describe('inspector CLI over stdio', () => {
  let llm, dir, env;
  // inspector-cli 1.0.3 resolves ../package.json against its cwd, so it runs one level below SDK.
  const cwd = join(SDK, 'node_modules');
  const inspect = (...args) => run(INSPECTOR, ['--cli', RLM, 'mcp', ...args], { cwd, env });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rlm-inspector-'));
    const script = join(dir, 'script.json');
    writeFileSync(script, JSON.stringify({
      rules: [{ match: 'Task:', reply: 'Counting.\n```repl\nSUBMIT(answer=str(len(context.split())))\n```\n' }],
      default: 'I am not sure.',
    }));
    llm = await startReady(['/usr/bin/python3', LLM_STANDIN, '--port', '0', '--api-key', KEY, '--script', script]);
    env = { ...process.env, OPENAI_BASE_URL: `${llm.url}/v1`, OPENAI_API_KEY: KEY, RLM_MODEL: 'openai/test-model' };
  });
  after(() => { llm?.proc.kill('SIGTERM'); rmSync(dir, { recursive: true, force: true }); });

  test('tools/list shows the eleven tools with schemas', async () => {
    const res = await inspect('--method', 'tools/list');
    assert.equal(res.code, 0, res.stderr);
    const { tools } = JSON.parse(res.stdout);
    assert.deepEqual(tools.map((t) => t.name).sort(), [
      'rlm_analyze', 'rlm_code', 'rlm_decompose', 'rlm_execute', 'rlm_status', 'sandbox_download',
      'sandbox_exec', 'sandbox_exec_stateful', 'sandbox_files', 'sandbox_shell', 'sandbox_upload']);
    for (const t of tools) assert.equal(t.inputSchema.type, 'object', t.name);
  });

  test('sandbox_exec runs Python and returns its output', async () => {
    const res = await inspect('--method', 'tools/call', '--tool-name', 'sandbox_exec',
                              '--tool-arg', 'code="print(sum(range(10)))"');
    assert.equal(res.code, 0, res.stderr);
    const out = JSON.parse(res.stdout);
    assert.equal(out.isError, undefined);
    assert.equal(out.content[0].text, '45\n');
    assert.equal(out.structuredContent.stdout, '45\n');
  });

  test('rlm_execute runs the loop against the LLM stand-in', async () => {
    const res = await inspect('--method', 'tools/call', '--tool-name', 'rlm_execute',
                              '--tool-arg', 'task="How many words?"', '--tool-arg', 'context="one two three"');
    assert.equal(res.code, 0, res.stderr);
    const out = JSON.parse(res.stdout);
    assert.equal(out.content[0].text, '3');
    assert.equal(out.structuredContent.reason, 'submitted');
    assert.equal(out.structuredContent.usage.calls, 1);
  });

  test('an unknown tool is a protocol error', async () => {
    const res = await inspect('--method', 'tools/call', '--tool-name', 'nope');
    assert.equal(res.code, 1);
    assert.match(res.stdout + res.stderr, /Unknown tool: nope/);
  });
});
