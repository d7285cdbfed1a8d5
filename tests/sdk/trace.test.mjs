// The trajectory page (`rlm trace --html`) in Debian's Chromium, driven through playwright-core:
// a 200-turn run with batches and a child run loads fast and without console errors, turns open
// on click, search and the keys work. Run from the repository root after `make`.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const RLM = fileURLToPath(new URL('../../rlm', import.meta.url));
let dir, browser, page, errors;

function trajectory() {
  const recs = [{ type: 'start', run: 'r1', depth: 0, task: 'long task', model: 'm', sub_model: 's' }];
  for (let turn = 1; turn <= 200; turn++) {
    recs.push({ type: 'subcall', run: 'r1', depth: 0, turn, kind: 'llm_query_batched', count: 2,
                model: 'openai/s', prompt_chars: 10, reply_chars: 2, duration: 0.01, replies: ['a', 'b'],
                items: [{ prompt: 'p1', input_tokens: 3, output_tokens: 1, cost: 0 },
                        { prompt: 'p2', input_tokens: 3, output_tokens: 1, cost: 0 }] });
    if (turn === 100) {
      recs.push({ type: 'start', run: 'r2', depth: 1, parent: 'r1', task: 'child task', model: 's' });
      recs.push({ type: 'step', run: 'r2', depth: 1, parent: 'r1', turn: 1, reply: 'child reply',
                  code: [], duration: 0.1 });
      recs.push({ type: 'final', run: 'r2', depth: 1, parent: 'r1', reason: 'submitted', fields: { answer: 'c' } });
      recs.push({ type: 'subcall', run: 'r1', depth: 0, turn, kind: 'rlm_query', child: 'r2', reason: 'submitted' });
    }
    recs.push({ type: 'step', run: 'r1', depth: 0, turn, duration: 0.5 + (turn % 5),
                reply: `Turn ${turn} plan.\n\`\`\`repl\nprint(${turn})\n\`\`\``,
                code: [{ code: `print(${turn})`, duration: 0.1, output: `needle-${turn} ` + 'y'.repeat(12000) }],
                usage: { input_tokens: 100, output_tokens: 10 } });
  }
  recs.push({ type: 'final', run: 'r1', depth: 0, reason: 'submitted', fields: { answer: 1 }, iterations: 200,
              usage: { calls: 200, llm_calls: 401, input_tokens: 20000, output_tokens: 2000, cost: 0.5, elapsed: 100 } });
  return recs.map((r) => JSON.stringify(r)).join('\n') + '\n';
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'rlm-page-'));
  writeFileSync(join(dir, 'run.jsonl'), trajectory());
  execFileSync(RLM, ['trace', join(dir, 'run.jsonl'), '--html', join(dir, 'run.html')]);
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
  page = await browser.newPage();
  errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('file://' + join(dir, 'run.html'));
});
after(async () => { await browser?.close(); rmSync(dir, { recursive: true, force: true }); });

test('a 200-turn page with batches and a child run gets ready, without errors', async () => {
  // the page's own time to ready, bounded only against a hang: a loaded machine's Chromium is slow
  const ready = Number(await page.getAttribute('body', 'data-ready'));
  assert.ok(ready > 0 && ready < 20000, `ready after ${ready} ms`);
  assert.deepEqual(errors, []);
  assert.equal(await page.locator('details.step').count(), 201, '200 turns and the child run\'s one');
  assert.equal(await page.locator('details.child').count(), 1);
  assert.match(await page.locator('table.totals').innerText(), /20000 in, 2000 out/);
});

test('turns are collapsed until clicked', async () => {
  assert.equal(await page.$$eval('details.step', (ds) => ds.filter((d) => d.open).length), 0);
  const turn7 = page.locator('details.step', { has: page.locator('summary', { hasText: /^Turn 7 / }) }).first();
  await turn7.locator('summary').first().click();
  assert.equal(await turn7.evaluate((d) => d.open), true);
  assert.match(await turn7.innerText(), /needle-7 /);
  // its 12,000-character output is folded under its first line and size
  const out = turn7.locator('details.out').first();
  assert.equal(await out.evaluate((d) => d.open), false);
  assert.match(await out.locator('summary').innerText(), /12009 characters: needle-7 /);
});

test('search opens and marks the turns that contain the text; the keys move and open', async () => {
  await page.fill('#q', 'needle-150 ');
  assert.equal(await page.locator('#hits').innerText(), '1 turns match');
  assert.equal(await page.locator('details.step.hit').count(), 1);
  await page.fill('#q', '');
  await page.locator('h1').click();
  await page.keyboard.press('j');
  await page.keyboard.press('o');
  const first = page.locator('details.step').first();
  assert.equal(await first.evaluate((d) => d.open), true, 'j then o opens the first turn');
});
