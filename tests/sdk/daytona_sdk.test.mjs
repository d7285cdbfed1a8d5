// Fidelity test: the official @daytonaio/sdk (pinned in package.json) against tests/standins/daytona.
// If the SDK can do its whole job against the stand-in, the stand-in speaks Daytona's wire protocol;
// the checks on files and processes also prove that commands, files and volumes are real.
// Run from the repository root: node --test tests/sdk/daytona_sdk.test.mjs
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import {
  Daytona, DaytonaAuthenticationError, DaytonaFileAccessDeniedError,
  DaytonaFileNotFoundError, DaytonaForbiddenError, DaytonaGitBranchNotFoundError, DaytonaNotFoundError,
  DaytonaProcessExecutionTimeoutError, DaytonaRateLimitError, DaytonaServiceUnavailableError, DaytonaValidationError,
  DaytonaTimeoutError,
} from '@daytonaio/sdk';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const STANDIN = join(ROOT, 'tests', 'standins', 'daytona');
const API_KEY = 'fidelity-test-key';
const HOME = '/home/daytona';
const MEM = `${HOME}/memory`;

let server;
let base;          // http://127.0.0.1:P
let daytona;
let volume;
let sandbox;       // the main sandbox, created with the volume mounted
let scratch;       // host temp dir; scratch/git is the stand-in's git host (--git-root)

async function startServer() {
  server = spawn('/usr/bin/python3', [STANDIN, '--port', '0', '--api-key', API_KEY,
                                      '--git-root', join(scratch, 'git')],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: server.stdout });
  const ready = await new Promise((resolve, reject) => {
    server.once('exit', (code) => reject(new Error(`stand-in exited with ${code} before READY`)));
    lines.once('line', resolve);
  });
  const m = /^READY (http:\/\/127\.0\.0\.1:\d+)$/.exec(ready);
  assert.ok(m, `unexpected first line: ${ready}`);
  return m[1];
}

async function control(path, body) {
  const res = await fetch(base + path, body === undefined ? {} : { method: 'POST', body: JSON.stringify(body) });
  assert.equal(res.status, 200, `${path}: ${res.status}`);
  return res.json();
}

async function until(what, probe, timeoutMs = 5000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function rejectsWith(promise, ErrorClass, check = () => true) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof ErrorClass, `expected ${ErrorClass.name}, got ${err?.constructor?.name}: ${err?.message}`);
    return check(err) !== false;
  });
}

function git(cwd, ...args) {
  return execFileSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd, encoding: 'utf8' }).trim();
}

describe('official Daytona SDK against the stand-in', () => {
  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'daytona-fidelity-'));
    base = await startServer();
    daytona = new Daytona({ apiKey: API_KEY, apiUrl: `${base}/api` });
  });

  after(async () => {
    await daytona?.[Symbol.asyncDispose]();
    if (server && server.exitCode === null) {
      const exited = new Promise((r) => server.once('exit', r));
      server.kill('SIGTERM');
      await exited;
    }
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('gets or creates a volume, which becomes ready', async () => {
    await rejectsWith(daytona.volume.get('rlm-memory'), DaytonaNotFoundError);
    volume = await daytona.volume.get('rlm-memory', true);
    assert.equal(volume.name, 'rlm-memory');
    assert.equal(volume.state, 'pending_create');
    volume = await until('volume ready', async () => {
      const v = await daytona.volume.get('rlm-memory');
      return v.state === 'ready' && v;
    });
    const listed = await daytona.volume.list();
    assert.deepEqual(listed.map((v) => v.id), [volume.id]);
  });

  it('creates a sandbox with a volume mount, env and labels, and waits until started', async () => {
    await control('/_control/reset', {});
    sandbox = await daytona.create({
      envVars: { FOO: 'bar' },
      labels: { suite: 'fidelity', role: 'main' },
      volumes: [{ volumeId: volume.id, mountPath: MEM }],
    });
    assert.equal(sandbox.state, 'started');
    assert.equal(sandbox.labels.suite, 'fidelity');
    assert.equal(sandbox.labels['code-toolbox-language'], 'python');
    const stats = await control('/_control/stats');
    assert.ok(stats.requests['GET /api/sandbox/{id}'] >= 2, 'the SDK polled the starting sandbox');
    assert.ok(stats.requests['GET /api/socket.io/'] >= 1, 'the SDK tried the event stream and was refused');
    assert.deepEqual(stats.sandboxes, [sandbox.id]);
  });

  it('executes commands with output, exit code, cwd and env', async () => {
    const hi = await sandbox.process.executeCommand('echo hi');
    assert.deepEqual([hi.exitCode, hi.result], [0, 'hi\n']);
    const r = await sandbox.process.executeCommand('echo $FOO $BAR; pwd; echo oops >&2; exit 3', '/tmp', { BAR: 'baz' });
    assert.equal(r.exitCode, 3);
    assert.equal(r.result, 'bar baz\n/tmp\noops\n');
    const home = await sandbox.process.executeCommand('pwd; echo $HOME');
    assert.equal(home.result, `${HOME}\n${HOME}\n`);
  });

  it('runs commands in a sandbox: no network, no host files', async () => {
    const net = await sandbox.process.executeCommand(
      'python3 -c "import socket; socket.create_connection((\'1.1.1.1\', 80), timeout=2)" 2>&1 | tail -1');
    assert.match(net.result, /Network is unreachable|OSError/);
    const host = await sandbox.process.executeCommand(`ls ${scratch}`);
    assert.notEqual(host.exitCode, 0, 'the host temp dir must not be visible');
  });

  it('kills a command at its timeout and answers the daemon timeout error', async () => {
    const started = Date.now();
    await rejectsWith(sandbox.process.executeCommand('sleep 30', undefined, undefined, 1),
      DaytonaProcessExecutionTimeoutError, (e) => e instanceof DaytonaTimeoutError && e.statusCode === 408);
    assert.ok(Date.now() - started < 20000, 'timed out at its 1 s timeout, not after the 30 s command');
  });

  it('runs python with codeRun (argv, env, exit code)', async () => {
    const r = await sandbox.process.codeRun('import sys, os\nprint(sys.argv[1:], os.environ["X"])',
      { argv: ['a', 'b'], env: { X: '1' } });
    assert.deepEqual([r.exitCode, r.result], [0, "['a', 'b'] 1\n"]);
    const failed = await sandbox.process.codeRun('import sys\nprint("bye")\nsys.exit(4)');
    assert.deepEqual([failed.exitCode, failed.result], [4, 'bye\n']);
  });

  it('runs session commands: sync with split output, shell state kept, async with input and logs', async () => {
    const p = sandbox.process;
    await p.createSession('s1');
    const sync = await p.executeSessionCommand('s1', { command: 'echo out; echo err >&2; cd /tmp; export Q=7; exit 2' });
    assert.equal(sync.exitCode, 2);
    assert.equal(sync.stdout, 'out\n');
    assert.equal(sync.stderr, 'err\n');
    const state = await p.executeSessionCommand('s1', { command: 'pwd; echo $Q' });
    assert.equal(state.stdout, '/tmp\n7\n');

    const bg = await p.executeSessionCommand('s1', { command: 'read line; echo got $line; echo warn >&2', runAsync: true });
    assert.ok(bg.cmdId);
    assert.equal(bg.exitCode, undefined);
    assert.equal((await p.getSessionCommand('s1', bg.cmdId)).exitCode, undefined, 'still waiting for input');
    await p.sendSessionCommandInput('s1', bg.cmdId, 'hello\n');
    const done = await until('async command exit', async () => {
      const c = await p.getSessionCommand('s1', bg.cmdId);
      return c.exitCode !== undefined && c;
    });
    assert.equal(done.exitCode, 0);
    const logs = await p.getSessionCommandLogs('s1', bg.cmdId);
    assert.equal(logs.stdout, 'got hello\n');
    assert.equal(logs.stderr, 'warn\n');
    const session = await p.getSession('s1');
    assert.equal(session.commands.length, 3);
    assert.ok((await p.listSessions()).some((s) => s.sessionId === 's1'));

    await p.deleteSession('s1');
    await rejectsWith(p.getSession('s1'), DaytonaNotFoundError);
  });

  it('keeps a background server alive and reachable over a unix socket from later commands', async () => {
    // the rlm host drives its Python driver this way: a long-lived async command, then separate executes
    const p = sandbox.process;
    await p.createSession('driver');
    const serverCode = [
      'import os, socket',
      's = socket.socket(socket.AF_UNIX); s.bind("/tmp/driver.sock"); s.listen()',
      'print("listening", flush=True)',
      'while True:',
      '    c, _ = s.accept(); c.sendall(b"pid=%d got=" % os.getpid() + c.recv(100)); c.close()',
    ].join('\n');
    writeFileSync(join(scratch, 'driver.py'), serverCode);
    await sandbox.fs.uploadFile(join(scratch, 'driver.py'), `${HOME}/driver.py`);
    const bg = await p.executeSessionCommand('driver', { command: 'python3 -u driver.py', runAsync: true });
    await until('driver listening', async () => (await p.getSessionCommandLogs('driver', bg.cmdId)).stdout === 'listening\n');
    const client = 'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.connect(\'/tmp/driver.sock\'); '
      + 's.sendall(b\'ping\'); print(s.recv(100).decode())"';
    const first = await p.executeCommand(client);
    const second = await p.executeCommand(client);
    assert.match(first.result, /^pid=\d+ got=ping\n$/);
    assert.equal(second.result, first.result, 'the same driver process answered both');
    await p.deleteSession('driver');
    const gone = await p.executeCommand(client);
    assert.notEqual(gone.exitCode, 0, 'deleting the session killed the driver');
  });

  it('uploads, downloads, lists, inspects, creates folders and deletes files', async () => {
    const fs = sandbox.fs;
    await fs.createFolder(`${HOME}/dir`, '750');
    const dirInfo = await fs.getFileDetails(`${HOME}/dir`);
    assert.equal(dirInfo.isDir, true);
    assert.equal(dirInfo.permissions, '0750');
    await fs.uploadFile(Buffer.from('hello'), `${HOME}/dir/hello.txt`);
    assert.deepEqual(await fs.downloadFile(`${HOME}/dir/hello.txt`), Buffer.from('hello'));
    const info = await fs.getFileDetails('dir/hello.txt');          // relative to the home directory
    assert.equal(info.name, 'hello.txt');
    assert.equal(info.size, 5);
    assert.equal(info.isDir, false);
    assert.equal(info.mode, '-rw-r--r--');
    const listing = await fs.listFiles(`${HOME}/dir`);
    assert.deepEqual(listing.map((f) => f.name), ['hello.txt']);
    const deep = await fs.listFiles(HOME, { depth: 2 });
    assert.ok(deep.some((f) => f.path === `${HOME}/dir/hello.txt`));

    // bulk-download error parts carry no `source`, so the SDK picks the class by status, keeping the code
    await rejectsWith(fs.downloadFile(`${HOME}/missing.txt`), DaytonaNotFoundError,
      (e) => e.code === 'FILE_NOT_FOUND' && e.statusCode === 404);
    await fs.uploadFiles([
      { source: Buffer.from('one'), destination: '/tmp/a/one.txt' },
      { source: Buffer.from([0, 1, 2, 255]), destination: `${HOME}/two.bin` },
    ]);
    const many = await fs.downloadFiles([
      { source: '/tmp/a/one.txt' }, { source: `${HOME}/two.bin` }, { source: `${HOME}/nope` }]);
    assert.equal(many[0].result.toString(), 'one');
    assert.deepEqual([...many[1].result], [0, 1, 2, 255]);
    assert.match(many[2].error, /not found/);
    assert.equal(many[2].errorDetails.code, 'FILE_NOT_FOUND');

    await assert.rejects(fs.deleteFile(`${HOME}/dir`), 'a non-empty directory needs recursive');
    await fs.deleteFile(`${HOME}/dir/hello.txt`);
    await rejectsWith(fs.getFileDetails(`${HOME}/dir/hello.txt`), DaytonaFileNotFoundError);
    await fs.deleteFile(`${HOME}/dir`, true);
    await rejectsWith(fs.getFileDetails(`${HOME}/dir`), DaytonaNotFoundError);
  });

  it('keeps file access inside the sandbox', async () => {
    const fs = sandbox.fs;
    await rejectsWith(fs.getFileDetails('/etc/passwd'), DaytonaFileAccessDeniedError);
    const denied = (e) => e.code === 'FILE_ACCESS_DENIED' && e.statusCode === 403;
    await rejectsWith(fs.getFileDetails('../../../etc/passwd'), DaytonaFileAccessDeniedError);
    await rejectsWith(fs.downloadFile('../../../etc/passwd'), DaytonaForbiddenError, denied);
    await sandbox.process.executeCommand('ln -sf /etc/shadow escape');   // a link meaning the *host* file
    await rejectsWith(fs.downloadFile(`${HOME}/escape`), DaytonaForbiddenError, denied);
    await rejectsWith(fs.getFileDetails(`${HOME}/escape`), DaytonaFileAccessDeniedError);
    // A file the upload cannot write: the daemon's bulk upload answers 400 and lists it
    // (apps/daemon/pkg/toolbox/fs/upload_files.go).
    await rejectsWith(fs.uploadFile(Buffer.from('x'), '/usr/evil'), DaytonaValidationError,
                      (e) => e.message.includes('/usr/evil'));
  });

  it('shares real files between the files API and commands', async () => {
    await sandbox.process.executeCommand('printf made-by-command > made.txt');
    assert.equal((await sandbox.fs.downloadFile(`${HOME}/made.txt`)).toString(), 'made-by-command');
    await sandbox.fs.uploadFile(Buffer.from('made-by-upload'), '/tmp/up.txt');
    const r = await sandbox.process.executeCommand('cat /tmp/up.txt');
    assert.equal(r.result, 'made-by-upload');
  });

  it('clones from a git host, honouring branch and commit; not from a path of this machine', async () => {
    const repo = join(scratch, 'git', 'repo');
    const url = 'https://git.rlm.test/team/repo.git';
    execFileSync('git', ['init', '-q', '-b', 'main', repo]);
    writeFileSync(join(repo, 'a.txt'), 'first\n');
    git(repo, 'add', '.');
    git(repo, 'commit', '-qm', 'first');
    const first = git(repo, 'rev-parse', 'HEAD');
    writeFileSync(join(repo, 'a.txt'), 'second\n');
    git(repo, 'commit', '-qam', 'second');
    git(repo, 'checkout', '-qb', 'feature');
    writeFileSync(join(repo, 'b.txt'), 'feature\n');
    git(repo, 'add', '.');
    git(repo, 'commit', '-qm', 'feature');
    git(repo, 'checkout', '-q', 'main');

    await sandbox.git.clone(url, 'clone-main');
    assert.equal((await sandbox.fs.downloadFile(`${HOME}/clone-main/a.txt`)).toString(), 'second\n');
    const origin = await sandbox.process.executeCommand('git -C clone-main remote get-url origin');
    assert.equal(origin.result.trim(), url);
    await sandbox.git.clone(url, `${HOME}/clone-feature`, 'feature');
    assert.equal((await sandbox.fs.downloadFile(`${HOME}/clone-feature/b.txt`)).toString(), 'feature\n');
    await sandbox.git.clone(url, 'clone-first', undefined, first);
    const head = await sandbox.process.executeCommand("git -c safe.directory='*' -C clone-first rev-parse HEAD");
    assert.equal(head.result.trim(), first);
    await rejectsWith(sandbox.git.clone(url, 'clone-bad', 'no-such-branch'), DaytonaGitBranchNotFoundError);
    // The daemon's git runs inside the sandbox, which cannot see this machine's disk.
    await assert.rejects(sandbox.git.clone(repo, 'clone-host-path'));
    await assert.rejects(sandbox.git.clone(`file://${repo}`, 'clone-host-url'));
  });

  it('keeps volume data after the sandbox is deleted and shows it in a new sandbox', async () => {
    await sandbox.process.executeCommand(`echo remembered > ${MEM}/note.txt`);
    const id = sandbox.id;
    await sandbox.delete();
    await rejectsWith(daytona.get(id), DaytonaNotFoundError);
    sandbox = await daytona.create({
      labels: { suite: 'fidelity', role: 'second' },
      volumes: [{ volumeId: volume.id, mountPath: MEM }],
    });
    const r = await sandbox.process.executeCommand(`cat ${MEM}/note.txt; ls ${HOME}`);
    assert.equal(r.result, 'remembered\nmemory\n', 'volume content is back, the old home is not');
    assert.equal((await sandbox.fs.downloadFile(`${MEM}/note.txt`)).toString(), 'remembered\n');
  });

  it('lists sandboxes by label, following the cursor', async () => {
    const other = await daytona.create({ labels: { suite: 'fidelity', role: 'other' } });
    const byRole = [];
    for await (const s of daytona.list({ labels: { role: 'other' } })) byRole.push(s.id);
    assert.deepEqual(byRole, [other.id]);
    await control('/_control/reset', {});
    const bySuite = [];
    for await (const s of daytona.list({ labels: { suite: 'fidelity' }, limit: 1 })) bySuite.push(s.id);
    assert.deepEqual(bySuite.sort(), [sandbox.id, other.id].sort());
    assert.equal((await control('/_control/stats')).requests['GET /api/sandbox'], 2, 'two pages of one');
    const fetched = await daytona.get(other.id);
    assert.equal(fetched.labels.role, 'other');
    assert.equal((await fetched.setLabels({ role: 'renamed' })).role, 'renamed');
    await other.delete();
  });

  it('stops and starts a sandbox; a stopped one refuses the toolbox as the runner does', async () => {
    await sandbox.stop();
    assert.equal(sandbox.state, 'stopped');
    await rejectsWith(sandbox.process.executeCommand('true'), DaytonaValidationError,
      (e) => /Is the Sandbox started\?/.test(e.message));
    await sandbox.start();
    assert.equal(sandbox.state, 'started');
    assert.equal((await sandbox.process.executeCommand(`cat ${MEM}/note.txt`)).result, 'remembered\n');
  });

  it('surfaces injected faults as the SDK error classes, with Retry-After', async () => {
    await control('/_control/faults', { method: 'POST', path: '/api/sandbox', status: 429, retry_after: 7 });
    await rejectsWith(daytona.create(), DaytonaRateLimitError, (e) => e.headers['retry-after'] === '7');
    await control('/_control/faults', { path: `/toolbox/${sandbox.id}/process/execute`, status: 503, count: 2 });
    await rejectsWith(sandbox.process.executeCommand('true'), DaytonaServiceUnavailableError);
    await rejectsWith(sandbox.process.executeCommand('true'), DaytonaServiceUnavailableError);
    assert.equal((await sandbox.process.executeCommand('echo ok')).result, 'ok\n', 'faults are used up');
  });

  it('rejects a wrong API key with the SDK authentication error', async () => {
    const wrong = new Daytona({ apiKey: 'not-the-key', apiUrl: `${base}/api` });
    try {
      await rejectsWith(wrong.volume.list(), DaytonaAuthenticationError, (e) => e.statusCode === 401);
      await rejectsWith(wrong.get(sandbox.id), DaytonaAuthenticationError);
    } finally {
      await wrong[Symbol.asyncDispose]();
    }
  });

  it('deletes the sandbox and the volume', async () => {
    await sandbox.delete();
    await daytona.volume.delete(volume);
    await rejectsWith(daytona.volume.get('rlm-memory'), DaytonaNotFoundError);
    const stats = await control('/_control/stats');
    assert.deepEqual(stats.sandboxes, []);
    assert.deepEqual(stats.volumes, []);
  });
});
