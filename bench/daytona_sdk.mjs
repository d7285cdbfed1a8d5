// The official TypeScript SDK's side of bench/daytona.lua: N sandboxes created, one command
// executed in each and deleted, all in parallel. Prints one JSON line {wall_ms, ok}.
// usage: node bench/daytona_sdk.mjs API_URL API_KEY N
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const { Daytona } = createRequire(join(ROOT, 'tests', 'sdk', 'package.json'))('@daytonaio/sdk');

const [apiUrl, apiKey, n] = process.argv.slice(2);
const daytona = new Daytona({ apiKey, apiUrl });

async function one(k) {
  const sandbox = await daytona.create({ labels: { bench: 'sdk' } });
  const r = await sandbox.process.executeCommand(`echo ${k}`);
  if (r.exitCode !== 0 || r.result.trim() !== String(k)) throw new Error(`bad result ${r.result}`);
  await sandbox.delete();
}

const t0 = performance.now();
const results = await Promise.allSettled(Array.from({ length: Number(n) }, (_, k) => one(k)));
const wall = performance.now() - t0;
const failed = results.filter((r) => r.status === 'rejected');
if (failed.length) console.error(String(failed[0].reason));
console.log(JSON.stringify({ wall_ms: wall, ok: results.length - failed.length }));
process.exit(0);
