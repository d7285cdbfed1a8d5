// `rlm mcp deploy` with the official MCP SDK client (pinned in package.json): deployed into the
// Daytona stand-in, reached through the sandbox's preview URL with the two tokens the deploy
// printed, its tools listed and sandbox_exec run; a wrong or missing token refused; --delete
// leaving nothing; no key in any output.
// Run from the repository root after `make`: node --test tests/sdk/mcp_deploy.test.mjs
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const path = (p) => fileURLToPath(new URL(p, import.meta.url));
const RLM = path('../../rlm');
const STANDIN = path('../standins/daytona');
const DAYTONA_KEY = 'sk-daytona-deploy-5ecret-0123456789';
const MODEL_KEY = 'sk-openai-deploy-5ecret-0123456789';

async function startReady(argv) {
  const proc = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: proc.stdout });
  const first = await new Promise((resolve, reject) => {
    lines.once('line', resolve);
    proc.once('exit', (code) => reject(new Error(`${argv[0]} exited with ${code}`)));
  });
  const m = /^READY (http:\/\/127\.0\.0\.1:\d+)$/.exec(first);
  assert.ok(m, `printed ${JSON.stringify(first)} instead of READY`);
  return { proc, url: m[1] };
}

const outputs = [];
function rlm(args, env) {
  return new Promise((resolve) => {
    execFile(RLM, args, { env, timeout: 180000, maxBuffer: 1 << 24 }, (err, stdout, stderr) => {
      outputs.push(stdout, stderr);
      resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr });
    });
  });
}

// The deployed server's processes (it runs as ~/.rlm/bin/rlm in a sandbox): only those below
// this test's stand-in, where its sandboxes run; another test run's deployment is not ours.
function deployedProcesses(standinPid) {
  const parent = new Map();
  const cmdline = new Map();
  for (const p of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'latin1');
      parent.set(Number(p), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
      cmdline.set(Number(p), readFileSync(`/proc/${p}/cmdline`, 'latin1'));
    } catch { /* gone meanwhile */ }
  }
  const below = (p) => {
    let q = parent.get(p);
    while (q !== undefined && q !== standinPid) q = parent.get(q);
    return q === standinPid;
  };
  return [...parent.keys()].filter((p) => below(p) && cmdline.get(p).includes('.rlm/bin/rlm'));
}

// The deployed server is reached through its sandbox's preview URL, which the stand-in serves by
// entering the sandbox's network namespace: setns needs CAP_SYS_ADMIN, which only root has.
const NEEDS_ROOT = process.getuid() === 0 ? false
  : 'needs root: as an ordinary user the Daytona stand-in cannot enter a sandbox\'s network namespace '
    + '(setns needs CAP_SYS_ADMIN), so a deployed server\'s preview URL never answers';

describe('rlm mcp deploy, reached with the official MCP client', { skip: NEEDS_ROOT }, () => {
  let daytona, env, info;
  before(async () => {
    daytona = await startReady([STANDIN, '--port', '0', '--api-key', DAYTONA_KEY]);
    env = { PATH: process.env.PATH, HOME: process.env.HOME, DAYTONA_API_KEY: DAYTONA_KEY,
            DAYTONA_API_URL: `${daytona.url}/api`, OPENAI_API_KEY: MODEL_KEY };
    const res = await rlm(['mcp', 'deploy', '--name', 'sdk', '--json'], env);
    assert.equal(res.code, 0, res.stderr);
    info = JSON.parse(res.stdout);
  });
  after(() => { daytona?.proc.kill('SIGTERM'); });

  async function connect(headers) {
    const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
    const client = new Client({ name: 'rlm-deploy-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(info.url), { requestInit: { headers } }));
    return client;
  }

  test('the printed configuration connects: tools listed, sandbox_exec runs', async () => {
    const client = await connect(info.config.mcpServers.rlm.headers);
    try {
      const { tools } = await client.listTools();
      const names = tools.map((t) => t.name);
      for (const name of ['sandbox_exec', 'rlm_execute', 'rlm_status']) assert.ok(names.includes(name), names.join());
      const res = await client.callTool({ name: 'sandbox_exec', arguments: { code: 'print(sum(range(10)))' } });
      assert.equal(res.isError ?? false, false, JSON.stringify(res));
      assert.equal(res.structuredContent.stdout, '45\n');
      assert.ok(deployedProcesses(daytona.proc.pid).length >= 1, 'the deployed server runs below the stand-in');
    } finally {
      await client.close();
    }
  });

  test('a wrong or missing token is refused', async () => {
    const good = info.config.mcpServers.rlm.headers;
    for (const headers of [
      { 'X-Daytona-Preview-Token': good['X-Daytona-Preview-Token'] },                    // no token
      { ...good, 'X-Rlm-Token': 'not-the-token' },                                       // wrong token
      { 'X-Rlm-Token': good['X-Rlm-Token'] },                                            // no preview token
      { ...good, 'X-Daytona-Preview-Token': 'not-the-preview-token' },                   // wrong one
    ]) {
      await assert.rejects(connect(headers), undefined, JSON.stringify(Object.keys(headers)));
    }
  });

  test('--delete leaves no sandbox and no process; no key was ever printed', async () => {
    const res = await rlm(['mcp', 'deploy', '--name', 'sdk', '--delete'], env);
    assert.equal(res.code, 0, res.stderr);
    const stats = await (await fetch(`${daytona.url}/_control/stats`)).json();
    assert.deepEqual(stats.sandboxes, []);
    assert.deepEqual(deployedProcesses(daytona.proc.pid), []);
    const all = outputs.join('\n');
    for (const key of [DAYTONA_KEY, MODEL_KEY]) assert.ok(!all.includes(key), 'a key in the output');
  });
});
