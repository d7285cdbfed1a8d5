// The SDK tests run under the Node that package.json pins, not the machine's own `node`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';

const pinned = JSON.parse(readFileSync(new URL('./package.json', import.meta.url))).dependencies.node;

test('the tests run under the Node pinned in tests/sdk/package.json', () => {
  assert.match(pinned, /^\d+\.\d+\.\d+$/);
  assert.equal(process.version, `v${pinned}`);
});

test('a `node` the tests start is the pinned one too', () => {
  assert.equal(execFileSync('node', ['--version'], { encoding: 'utf8' }).trim(), `v${pinned}`);
});
