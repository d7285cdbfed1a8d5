// `rlm mcp --http` with many agents at once: 50 official SDK clients on one host (one address,
// as behind a proxy), 7 tool calls each, every call answered.
// Run from the repository root after `make`: node --test tests/sdk/mcp_many.test.mjs
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const RLM = fileURLToPath(new URL('../../rlm', import.meta.url));
const CLIENTS = 50;

let server, url;
before(async () => {
  server = spawn(RLM, ['mcp', '--http', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const first = await new Promise((resolve, reject) => {
    createInterface({ input: server.stdout }).once('line', resolve);
    server.once('exit', (code) => reject(new Error(`rlm mcp exited with ${code}`)));
  });
  const m = /^READY (http:\/\/127\.0\.0\.1:\d+)$/.exec(first);
  assert.ok(m, `rlm mcp printed ${JSON.stringify(first)}`);
  url = new URL(`${m[1]}/mcp`);
});
after(() => server?.kill('SIGTERM'));

const text = (r) => r.content.map((c) => c.text ?? '').join('\n');

async function agent(n) {
  const client = new Client({ name: `agent-${n}`, version: '0' });
  await client.connect(new StreamableHTTPClientTransport(url));
  const done = [];
  try {
    const call = async (name, args) => {
      const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 600000 });
      assert.ok(!r.isError, `agent ${n} ${name}: ${text(r)}`);
      done.push(name);
      return r;
    };
    await call('sandbox_upload', { path: `data/${n}.txt`, content: `agent ${n}\n` });
    await call('sandbox_exec_stateful', { code: `n = ${n}` });
    const r = await call('sandbox_exec_stateful', { code: `print(open('data/${n}.txt').read().strip(), n * 2)` });
    assert.equal(r.structuredContent.stdout, `agent ${n} ${n * 2}\n`);
    const files = await call('sandbox_files', { path: 'data' });
    assert.match(text(files), new RegExp(`${n}\\.txt`));
    const back = await call('sandbox_download', { path: `data/${n}.txt` });
    assert.match(text(back), new RegExp(`agent ${n}`));
    await call('rlm_status', {});
    await call('rlm_status', {});
  } finally {
    await client.close();
  }
  return done.length;
}

test(`${CLIENTS} SDK clients on one address, 7 calls each: every call succeeds`, { timeout: 900000 }, async () => {
  const results = await Promise.allSettled(Array.from({ length: CLIENTS }, (_, i) => agent(i + 1)));
  const failed = results.filter((r) => r.status === 'rejected').map((r) => String(r.reason).slice(0, 300));
  assert.deepEqual(failed, [], `${failed.length} clients failed`);
  assert.equal(results.reduce((sum, r) => sum + r.value, 0), CLIENTS * 7);
});
