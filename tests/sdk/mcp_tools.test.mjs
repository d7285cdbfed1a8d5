// The user's MCP tool servers, with the official MCP SDK (@modelcontextprotocol/sdk, pinned):
//   - the stand-in tests/standins/mcp_tools behaves as a real MCP server to the SDK's client over
//     Streamable HTTP (session, paged tools/list, structured results checked against their
//     output schema, isError, the bearer token, session end);
//   - an SDK client passes that server to rlm mcp's rlm_execute (tool_servers): the run's code
//     calls its tool, the answer comes back, the call is in the run's usage and the client's log;
//     a stdio command is refused.
// Run from the repository root after `make`: node --test tests/sdk/mcp_tools.test.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const path = (p) => fileURLToPath(new URL(p, import.meta.url));
const RLM = path('../../rlm');
const TOOLS_STANDIN = path('../standins/mcp_tools');
const LLM_STANDIN = path('../standins/llm');
const TOKEN = 'tools-token-0123456789abcdef';
const KEY = 'sk-mcp-tools-test-key-0123456789';

/** Starts argv and resolves with its READY url once it prints the line. */
async function startReady(argv) {
  const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
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

async function sdkClient(transport) {
  const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
  const client = new Client({ name: 'rlm-tools-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

async function httpTransport(url, headers) {
  const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
  return new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
}

describe('the mcp_tools stand-in, to the official SDK client', () => {
  let standin, client;
  before(async () => {
    standin = await startReady(['/usr/bin/python3', TOOLS_STANDIN, '--port', '0', '--token', TOKEN]);
    client = await sdkClient(await httpTransport(`${standin.url}/mcp`, { Authorization: `Bearer ${TOKEN}` }));
  });
  after(async () => { await client?.close(); standin?.proc.kill('SIGTERM'); });

  test('lists every tool across pages and calls them', async () => {
    assert.equal(client.getServerVersion().name, 'mcp-tools-standin');
    const names = [];
    let cursor;
    do {
      const page = await client.listTools(cursor ? { cursor } : {});
      names.push(...page.tools.map((t) => t.name));
      cursor = page.nextCursor;
    } while (cursor);
    assert.deepEqual(names, ['add', 'greet', 'secret_check', 'fail', 'slow']);
    // the SDK checks structuredContent against the tool's outputSchema (from the listing)
    const sum = await client.callTool({ name: 'add', arguments: { a: 2, b: 40 } });
    assert.deepEqual(sum.structuredContent, { sum: 42 });
    const hi = await client.callTool({ name: 'greet', arguments: { name: 'Ada', polite: true } });
    assert.equal(hi.content[0].text, 'Good day, Ada.');
    const failed = await client.callTool({ name: 'fail', arguments: { why: 'on purpose' } });
    assert.equal(failed.isError, true);
    assert.equal(failed.content[0].text, 'it failed: on purpose');
    await assert.rejects(client.callTool({ name: 'nope', arguments: {} }), /Unknown tool/);
  });

  test('refuses a client without the token, and forgets an ended session', async () => {
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    await assert.rejects(sdkClient(new StreamableHTTPClientTransport(new URL(`${standin.url}/mcp`))), /unauthorized/);
    const transport = await httpTransport(`${standin.url}/mcp`, { Authorization: `Bearer ${TOKEN}` });
    const other = await sdkClient(transport);
    const sid = transport.sessionId;
    assert.match(sid, /^[0-9a-f]{32}$/);
    await transport.terminateSession();
    const res = await fetch(`${standin.url}/mcp`, { method: 'POST', headers: {
      Authorization: `Bearer ${TOKEN}`, 'Content-Type': 'application/json', 'Mcp-Session-Id': sid,
      Accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }) });
    assert.equal(res.status, 404);
    await other.close();
  });
});

describe('rlm mcp runs code that calls the tools of a server the SDK client passes', () => {
  let standin, llm, client, dir;
  const logs = [];
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rlm-mcp-tools-'));
    const script = join(dir, 'script.json');
    writeFileSync(script, JSON.stringify({
      rules: [{ match: 'Task: add with a tool',
                reply: 'Using the tool.\n```repl\nSUBMIT(answer=str(add(20, 22)["sum"]))\n```\n' }],
      default: 'I am not sure.',
    }));
    standin = await startReady(['/usr/bin/python3', TOOLS_STANDIN, '--port', '0', '--token', TOKEN]);
    llm = await startReady(['/usr/bin/python3', LLM_STANDIN, '--port', '0', '--api-key', KEY, '--script', script]);
    const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');
    const env = { ...process.env, OPENAI_BASE_URL: `${llm.url}/v1`, OPENAI_API_KEY: KEY, RLM_MODEL: 'openai/test-model' };
    client = await sdkClient(new StdioClientTransport({ command: RLM, args: ['mcp'], env, stderr: 'inherit' }));
    const { LoggingMessageNotificationSchema } = await import('@modelcontextprotocol/sdk/types.js');
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(String(n.params.data)));
  });
  after(async () => {
    await client?.close();
    standin?.proc.kill('SIGTERM');
    llm?.proc.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  });

  test('rlm_execute takes tool_servers: the code calls add, counted and logged', async () => {
    const { tools } = await client.listTools();
    const execute = tools.find((t) => t.name === 'rlm_execute');
    assert.equal(execute.inputSchema.properties.tool_servers.type, 'array');
    const res = await client.callTool({ name: 'rlm_execute', arguments: {
      task: 'add with a tool',
      tool_servers: [{ url: `${standin.url}/mcp`, headers: { Authorization: `Bearer ${TOKEN}` } }] } });
    assert.equal(res.isError, undefined, res.content[0].text);
    assert.equal(res.content[0].text, '42');
    assert.equal(res.structuredContent.usage.by_model['tool:add'].calls, 1);
    assert.ok(logs.some((l) => l.startsWith('tool add: answered')), logs.join('\n'));
    const stats = await (await fetch(`${standin.url}/_stats`)).json();
    assert.equal(stats.calls.add, 1);
  });

  test('a stdio command is refused with the reason', async () => {
    const res = await client.callTool({ name: 'sandbox_exec', arguments: {
      code: 'print(1)', tool_servers: [{ command: 'touch /tmp/never' }] } });
    assert.equal(res.isError, true);
    assert.match(res.content[0].text, /^tool_servers\[0\]: a client cannot have the server start programs on its host/);
  });
});
