// The dashboard, end to end in headless Chromium (Debian's, ATF_CHROMIUM), against the atf dev
// that the Go test TestDashboardUI started (ATF_URL, with the token ATF_TOKEN) and filled with
// tasks in every status. The tests run in order and share one page; screenshots go to
// ATF_SCREENSHOTS/dashboard-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright';

const { ATF_URL: url, ATF_TOKEN: token, ATF_CHROMIUM: executablePath, ATF_SCREENSHOTS: shots } = process.env;
const STATUSES = ['pending', 'new', 'enqueued', 'processing', 'retriable_failure', 'success',
  'fatal_failure', 'dead', 'cancelled', 'dropped', 'upstream_failed'];
const WAIT = { timeout: 15000 };

let browser, page;
before(async () => {
  browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
  // A zone with a half-hour offset and no summer time: the page shows times in it.
  page = await browser.newPage({ viewport: { width: 1500, height: 900 }, timezoneId: 'Asia/Kolkata' });
  page.on('dialog', (d) => d.accept()); // the confirms of drop and bulk cancel
  page.on('pageerror', (e) => console.error('page error:', e.message));
  page.on('console', (m) => m.type() === 'error' && console.error('page console:', m.text()));
});
after(() => browser?.close());

const shot = (name) => page.screenshot({ path: `${shots}/dashboard-${name}.png`, fullPage: true });
// the API as the page calls it, with the token the page keeps
const apiGet = (path) => page.evaluate(async ([p, t]) => (await fetch(p, { headers: { Authorization: 'Bearer ' + t } })).json(), [path, token]);
// inKolkata is how the page writes a time of the API in the page's zone (UTC+05:30), to the ms.
const inKolkata = (iso) => new Date(Date.parse(iso) + 330 * 60000).toISOString().replace('T', ' ').replace('Z', ' UTC+05:30');
const row = (lambda) => page.locator(`#lambdas tr[data-lambda="${lambda}"]`);

test('asks for the token, then shows the lambdas with tasks in every status', async () => {
  await page.goto(url + '/');
  await page.locator('#login input[name=token]').fill(token, WAIT);
  await page.locator('#login button').click();
  await row('echo').waitFor(WAIT);
  for (const s of STATUSES) {
    const cells = await page.locator(`#lambdas td[data-count="${s}"]`).allTextContents();
    assert.ok(cells.some((n) => Number(n) > 0), `no lambda shows a task ${s}: ${cells}`);
  }
  assert.equal(await row('echo').locator('td[data-count="success"]').textContent(), '3');
  await page.locator('#lambdas tr[data-lambda="echo"] [data-priority="low"]').filter({ hasText: 'low 1' }).waitFor(WAIT);
  await row('echo').locator('[data-collection="spam"]').filter({ hasText: 'drop' }).waitFor(WAIT);
  await shot('lambdas');
});

test('shows what each lambda\'s work would cost on AWS today, more than nothing once its tasks ran', async () => {
  await page.goto(url + '/#/lambdas');
  const cell = row('echo').locator('td[data-cost]');
  await cell.filter({ hasText: /^\$0\.0*[1-9]/ }).waitFor(WAIT);
  assert.match(await cell.locator('span').getAttribute('title'), /^\d+ WRU and \d+ RRU in [1-9]\d* transitions$/);
  const echo = (await apiGet('/v1/dashboard/costs')).lambdas.find((c) => c.lambda === 'echo');
  assert.ok(echo.usd > 0 && echo.write_units > 0 && echo.transitions > 0, `echo's costs: ${JSON.stringify(echo)}`);
  assert.match(await page.locator('#costs-note').textContent(), /make bench/);
  await shot('costs');
});

test('pauses a lambda and opens it again', async () => {
  await row('echo').locator('button[data-mode="pause"]').click();
  await row('echo').locator('[data-gate="pause"]').waitFor(WAIT);
  const paused = (await apiGet('/v1/lambdas')).lambdas.find((l) => l.name === 'echo');
  assert.deepEqual(paused.gates.filter((g) => !g.collection).map((g) => g.mode), ['pause']);
  await row('echo').locator('button[data-mode="open"]').click();
  await row('echo').locator('[data-gate="open"]').waitFor(WAIT);
});

test('shows each lambda\'s limits and the starts they held today, and its tasks by key', async () => {
  await page.goto(url + '/#/lambdas');
  const limits = row('block').locator('td[data-limits]');
  await limits.locator('[data-limit="key_concurrency"]').filter({ hasText: /^key_concurrency 1$/ }).waitFor(WAIT);
  await limits.locator('[data-limit="rate"]').filter({ hasText: /^rate 100\/s$/ }).waitFor(WAIT);
  // block's one slot runs one task at a time, so its limits hold no start: the page says so
  const block = (await apiGet('/v1/dashboard/limits')).lambdas.find((l) => l.lambda === 'block');
  assert.deepEqual(block, { lambda: 'block', limits: { key_concurrency: 1, rate: '100/s' }, held: {} });
  assert.equal(await limits.locator('[data-held]').textContent(), 'no start held today');
  assert.equal(await row('echo').locator('td[data-limits] .muted').first().textContent(), 'none');
  assert.match(await page.locator('#limits-note').textContent(), /held back since midnight UTC/);

  await limits.locator('a', { hasText: 'keys' }).click();
  const waiting = page.locator('#keys-waiting'), running = page.locator('#keys-running');
  await waiting.locator('tr[data-key="acme"] td.num').filter({ hasText: /^1$/ }).waitFor(WAIT);
  // the lambda picked is the link's (the select shows it once the lambdas are loaded too)
  await page.waitForFunction(() => document.querySelector('#keys select[name=lambda]').value === 'block', null, WAIT);
  assert.equal(await waiting.locator('tr[data-key="bolt"] td.num').textContent(), '1');
  assert.equal(await waiting.locator('tr[data-key=""] td').first().textContent(), '(no key)');
  assert.equal(await waiting.locator('[data-of]').textContent(), 'of all 3 waiting tasks');
  assert.equal(await running.locator('tr[data-key="acme"] td.num').textContent(), '1');
  assert.equal(await running.locator('tbody tr').count(), 1);
  assert.equal(await running.locator('[data-of]').textContent(), 'of all 1 running task');
  await shot('keys');
});

test('searches tasks by status and shows a task with its result and graph', async () => {
  await page.goto(url + '/#/tasks');
  await page.locator('#task-search select[name=lambda]').selectOption('echo');
  await page.locator('#task-search select[name=status]').selectOption('success');
  await page.locator('#task-search button').click();
  await page.locator('table.tasks tr[data-task="ok-2"]').waitFor(WAIT);
  assert.equal(await page.locator('table.tasks tbody tr').count(), 3);
  await page.locator('table.tasks tr[data-task="ok-2"] a').click();
  await page.locator('#task-detail pre').filter({ hasText: '"n": 2' }).first().waitFor(WAIT);

  // by id: the fatal task, its error, and the task that waited for it
  await page.goto(url + '/#/tasks');
  await page.locator('#task-search select[name=lambda]').selectOption('fatal');
  await page.locator('#task-search input[name=id]').fill('fatal-1');
  await page.locator('#task-search button').click();
  await page.locator('#task-detail h2 [data-status="fatal_failure"]').waitFor(WAIT);
  await page.locator('#task-detail pre.error').filter({ hasText: 'bad input, no retry' }).waitFor(WAIT);
  // its history: the one attempt, fatal, with its error
  const attempt = page.locator('#attempts tr[data-attempt="1"]');
  await attempt.filter({ hasText: 'fatal' }).filter({ hasText: 'bad input, no retry' }).waitFor(WAIT);
  // and its log: what the handler wrote to it during the attempt, shown open as the latest
  const log = page.locator('#attempt-logs details[data-attempt-log="1"] pre');
  await log.filter({ hasText: 'checking the input of fatal-1' }).waitFor(WAIT);
  assert.equal(await log.textContent(), 'checking the input of fatal-1\nthe input is marked bad\n');
  await page.locator('#downstreams li').filter({ hasText: 'echo/orphan' }).locator('[data-status="upstream_failed"]').waitFor(WAIT);
  await shot('task');
  await page.locator('#downstreams a').filter({ hasText: 'echo/orphan' }).click();
  await page.locator('#upstreams li').filter({ hasText: 'fatal/fatal-1' }).waitFor(WAIT);
});

test('shows times with their date and zone, to the second in lists and the ms on a task', async () => {
  await page.goto(url + '/#/tasks?lambda=echo&status=success');
  const runAt = page.locator('table.tasks tr[data-task="ok-2"] td').nth(5);
  await runAt.waitFor(WAIT);
  assert.match(await runAt.textContent(), /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\+05:30$/);
  const t = await apiGet('/v1/lambdas/echo/tasks/ok-2');
  await page.goto(url + '/#/task/echo/ok-2');
  const created = page.locator('#task-detail dt:text-is("created") + dd');
  await created.waitFor(WAIT);
  assert.equal(await created.textContent(), inKolkata(t.created_at));
  assert.equal(await page.locator('#task-detail dt:text-is("updated") + dd').textContent(), inKolkata(t.updated_at));
});

test('pauses a schedule from the Operations page, sees it paused, and resumes it there', async () => {
  await page.goto(url + '/#/ops?lambda=echo');
  const daily = page.locator('#schedules tr[data-schedule="daily"]');
  const state = daily.locator('td').nth(2);
  await state.filter({ hasText: /^active$/ }).waitFor(WAIT);
  await daily.getByRole('button', { name: 'pause' }).click();
  await state.filter({ hasText: /^paused$/ }).waitFor(WAIT);
  assert.equal((await apiGet('/v1/lambdas/echo/schedules/daily')).state, 'paused');
  await daily.getByRole('button', { name: 'resume' }).click();
  await state.filter({ hasText: /^active$/ }).waitFor(WAIT);
  assert.equal((await apiGet('/v1/lambdas/echo/schedules/daily')).state, 'active');
});

test('lists the failed tasks of every lambda, the latest first, and filters them by status', async () => {
  await page.goto(url + '/#/tasks');
  await page.locator('header nav a[href="#/failed"]').click();
  const dead = page.locator('#failed tr[data-lambda="once"][data-task="dead-1"]');
  const fatal = page.locator('#failed tr[data-lambda="fatal"][data-task="fatal-1"]');
  await dead.locator('[data-status="dead"]').waitFor(WAIT);
  await fatal.locator('[data-status="fatal_failure"]').waitFor(WAIT);
  assert.equal(await fatal.locator('td').first().textContent(), 'fatal'); // the lambda's column
  // Exactly the API's page: the two that failed for good, not the retriable nor the
  // upstream_failed, the latest updated first.
  const listed = (await apiGet('/v1/tasks?limit=50')).tasks;
  assert.deepEqual(listed.map((t) => t.lambda + '/' + t.id).sort(), ['fatal/fatal-1', 'once/dead-1']);
  assert.ok(Date.parse(listed[0].updated_at) >= Date.parse(listed[1].updated_at), 'the API lists the latest first');
  const shown = await page.locator('#failed table.tasks tbody tr').evaluateAll((trs) => trs.map((tr) => tr.dataset.lambda + '/' + tr.dataset.task));
  assert.deepEqual(shown, listed.map((t) => t.lambda + '/' + t.id));
  await shot('failed');
  await page.locator('#failed-filter select[name=status]').selectOption('dead');
  await fatal.waitFor({ state: 'detached', ...WAIT });
  await dead.waitFor(WAIT);
  assert.equal(await page.locator('#failed table.tasks tbody tr').count(), 1);
});

test('says which paused gate holds a task, in its list and on its page', async () => {
  const says = 'held by the paused gate of collection hold of echo';
  await page.goto(url + '/#/tasks?lambda=echo&collection=hold');
  // new, or enqueued if it was sent ahead: either way it waits for the gate
  await page.locator('table.tasks tr[data-task="held-1"] .held').filter({ hasText: says }).waitFor(WAIT);
  await page.goto(url + '/#/task/echo/held-1');
  await page.locator('#held-by').filter({ hasText: says }).waitFor(WAIT);
  await shot('held');
  // A task no gate holds says nothing of one.
  await page.goto(url + '/#/task/echo/ok-1');
  await page.locator('#task-detail h2 [data-status="success"]').waitFor(WAIT);
  assert.equal(await page.locator('#held-by, .held').count(), 0);
});

test('redrives a dead task from the dead letters, and it succeeds', async () => {
  await page.goto(url + '/#/ops?lambda=once');
  const dead = page.locator('#dead-letters tr[data-task="dead-1"]');
  await dead.locator('[data-status="dead"]').waitFor(WAIT);
  await shot('operations');
  await dead.locator('button[data-action="redrive"]').click();
  await dead.waitFor({ state: 'detached', ...WAIT }); // live: the list no longer holds it
  await page.goto(url + '/#/task/once/dead-1');
  await page.locator('#task-detail h2 [data-status="success"]').waitFor(WAIT);
  assert.match(await page.locator('#task-detail').textContent(), /"ok": true/);
});

test('cancels a running task, which ends cancelled', async () => {
  await page.goto(url + '/#/task/block/run-1');
  await page.locator('#task-detail h2 [data-status="processing"]').waitFor(WAIT);
  await page.locator('#task-detail button[data-action="cancel"]').click();
  await page.locator('#task-detail h2 [data-status="cancelled"]').waitFor(WAIT); // without a reload
  assert.equal((await apiGet('/v1/lambdas/block/tasks/run-1')).status, 'cancelled');
});

test('charts the last hour of deliveries and outcomes', async () => {
  await page.goto(url + '/#/charts');
  const totals = page.locator('#totals');
  await totals.waitFor(WAIT);
  const delivered = Number((await totals.textContent()).match(/delivered (\d+)/)[1]);
  assert.ok(delivered >= 8, `delivered ${delivered}, want at least the 8 runs seeded and redriven`);
  assert.match(await totals.textContent(), /failed for good [1-9]/);
  assert.ok(await page.locator('svg.chart rect.bar').count() > 0, 'no bars drawn');
  // The latency counts from run_at, so a gate's hold is in it: the chart says so.
  assert.match(await page.locator('#latency-note').textContent(), /held by a paused gate/);
  await shot('charts');
});
