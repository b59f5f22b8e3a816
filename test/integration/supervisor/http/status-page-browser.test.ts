/**
 * The operator status page end to end in a real browser: Debian's chromium (never a downloaded
 * build) driven by playwright-core, against real daemons on loopback. Sign-in with the token;
 * an unavailable mode shows its requirement; a running turn appears and disappears; an egress
 * denial appears live, and so do the capacity, drain mode and the chart of the last hour. Screenshots are kept in .tap/screenshots/status-page/ (CI keeps .tap/).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { chromium, type BrowserContext, type Page, type Request } from 'playwright-core';
import { createMemoryLogger } from '../../../../core/log.js';
import type { DaemonHandle } from '../../../../supervisor/daemon.js';
import { contractProblems, documented, messageProblems } from '../../../support/api-contract.js';
import { startTestDaemon } from '../../../support/app-server.js';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { apiRequest } from '../../../support/served-api.js';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];
const TOKEN = 'status-page-browser-test-token-0123456789';
const repoRoot = path.resolve(import.meta.dirname, '../../../..');
const screenshots = path.join(repoRoot, '.tap', 'screenshots', 'status-page');

stopTapInjectingIntoChildren();
if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: scripts/install-deps.sh installs chromium`);
fs.mkdirSync(screenshots, { recursive: true });
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-browser-'));
fs.chmodSync(dir, 0o755);
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));

async function daemon(
  name: string,
  config: Record<string, unknown>,
  turns: boolean,
  options: { tokenFile?: boolean } = {},
): Promise<DaemonHandle> {
  const file = path.join(dir, `${name}.json`);
  fs.writeFileSync(
    file,
    JSON.stringify({
      dataDir: path.join(dir, name),
      // Without apiToken the server makes <dataDir>/api-token, which its sign-in form names.
      ...(options.tokenFile === true ? {} : { apiToken: TOKEN }),
      listen: { tcp: '127.0.0.1:0', socket: null, allowNonLoopback: false },
      ...config,
    }),
  );
  const daemon = await startTestDaemon(
    { configPath: file, env: {}, logger: createMemoryLogger('warn').logger, turns },
    name,
  );
  t.teardown(() => daemon.close());
  return daemon;
}

const base = (d: DaemonHandle): string => `http://127.0.0.1:${d.http.tcp!.port}`;

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-chromium-profile-'));
t.teardown(() => fs.rmSync(userDataDir, { recursive: true, force: true }));
const context: BrowserContext = await chromium.launchPersistentContext(userDataDir, {
  executablePath: CHROMIUM,
  headless: true,
  args: CHROMIUM_FLAGS,
});
t.teardown(() => context.close());

// Every API answer and event-stream message the page receives is checked against the OpenAPI
// document; the last test asserts that none broke it.
const browserProblems: string[] = [];
const browserChecks: Array<Promise<void>> = [];
let checkedAnswers = 0;
let checkedMessages = 0;
async function checkAnswer(request: Request): Promise<void> {
  const url = new URL(request.url());
  if (!documented(url.pathname)) return;
  try {
    const response = await request.response();
    if (response === null) return;
    const [headers, text] = await Promise.all([response.allHeaders(), response.text()]);
    const where = `${url.pathname}${url.search}`;
    browserProblems.push(...contractProblems(request.method(), where, response.status(), headers, text));
    checkedAnswers += 1;
  } catch (error) {
    // A page the test closed, or navigated away from, takes its last answers' bodies with it:
    // the browser no longer has them, which is not the server's doing.
    if (!/closed|navigated away|No resource with given identifier/i.test(String(error)))
      browserProblems.push(`${request.method()} ${url.pathname}: ${String(error)}`);
  }
}
context.on('page', (page) => {
  page.on('requestfinished', (request) => browserChecks.push(checkAnswer(request)));
  page.on('websocket', (socket) => {
    const where = new URL(socket.url()).pathname;
    socket.on('framereceived', ({ payload }) => {
      browserProblems.push(...messageProblems(where, String(payload)));
      checkedMessages += 1;
    });
  });
});

async function signIn(page: Page, at: string, token = TOKEN): Promise<void> {
  await page.goto(`${at}/ui/`);
  await page.waitForURL(`${at}/ui/login`);
  await page.fill('#token', 'not-the-token-at-all');
  await page.click('#sign-in');
  await page.waitForURL(`${at}/ui/login#failed`);
  await page.locator('#failed').waitFor({ state: 'visible' });
  await page.fill('#token', token);
  await page.click('#sign-in');
  await page.waitForURL(`${at}/ui/`);
}

t.test('an unavailable mode shows its requirement', async (t) => {
  const broken = await daemon(
    'broken',
    { identityHelper: { path: '/nonexistent/turnhost-identity-helper', configPath: null } },
    false,
  );
  const page = await context.newPage();
  await signIn(page, base(broken));
  const ordinary = page.locator('#mode-ordinary');
  await ordinary.locator('td.unavailable').waitFor();
  const text = await ordinary.textContent();
  t.match(text, /unavailable/);
  t.match(text, /identity helper \/nonexistent\/turnhost-identity-helper does not exist/, 'the requirement, verbatim');
  t.match(await page.locator('#mode-restricted').textContent(), /disabled.*modes\.restricted\.enabled is false/);
  const cookies = await context.cookies(base(broken));
  t.match(cookies, [{ name: 'turnhost_session', httpOnly: true, sameSite: 'Strict' }]);
  t.notOk(
    // A string, evaluated in the page: the test's own TypeScript has no DOM types.
    await page.evaluate("document.cookie.includes('turnhost_session')"),
    'scripts cannot read the session cookie',
  );
  await page.screenshot({ path: path.join(screenshots, '1-unavailable-mode.png'), fullPage: true });
  await page.close();
});

t.test('a running turn appears and disappears; a denial appears live', async (t) => {
  const workspace = path.join(dir, 'workspace');
  fs.mkdirSync(workspace, { mode: 0o777 });
  fs.chmodSync(workspace, 0o777);
  const live = await daemon(
    'live',
    { turns: { workspaceRoots: [workspace], preparedWorkers: 0, maxConcurrent: 4 } },
    true,
  );
  const page = await context.newPage();
  await signIn(page, base(live));
  await page.locator('#connection.live').waitFor();
  t.equal(await page.locator('#running-turns tbody tr').count(), 0, 'no turn runs yet');

  const script =
    "const port = process.env.HTTP_PROXY.split(':')[2];" +
    "require('http').get({ host: '127.0.0.1', port, path: 'http://denied.example.test/', headers: { host: 'denied.example.test' } }, (r) => r.resume());";
  const connection = { target: { kind: 'tcp' as const, host: '127.0.0.1', port: live.http.tcp!.port }, token: TOKEN };
  const created = await apiRequest(connection, 'POST', '/api/turns', {
    sessionId: 'browser',
    mode: 'ordinary',
    cwd: workspace,
    argv: ['/bin/sh', '-c', `${process.execPath} -e "${script}"; while [ ! -e stop ]; do sleep 0.1; done`],
  });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  const id = (created.body as { turn: { id: string } }).turn.id;
  const row = page.locator(`#running-turns tr[data-turn-id="${id}"]`);
  await row.waitFor();
  t.match(await row.textContent(), /browser.*ordinary.*sh/, 'the running turn, live');
  const denial = page.locator('#denials li[data-host="denied.example.test"]');
  await denial.waitFor();
  t.match(await denial.textContent(), /egress_denial .*host=denied\.example\.test .*reason=not_allowlisted/);
  await page.screenshot({ path: path.join(screenshots, '2-running-turn-and-denial.png'), fullPage: true });

  // Capacity and the last hour's chart, drawn by the page: this turn and its denial in the newest bucket.
  await page.locator('#capacity', { hasText: '1 of 4 turns running, 3 free slots, 0 workspaces held.' }).waitFor();
  await page.locator('#chart g[data-bucket="11"][data-turns="1"][data-denials="1"]').waitFor();
  t.equal(await page.locator('#chart g').count(), 12, 'twelve 5-minute buckets');
  t.equal(await page.locator('#chart rect.bar-turns[height="0"]').count(), 11, 'no turn in the older buckets');
  t.match(await page.locator('#chart-summary').textContent(), /Last hour: 1 turns started, 1 egress denials\./);
  t.notOk(await page.locator('#draining').isVisible(), 'not draining');
  const drained = await apiRequest(connection, 'POST', '/api/drain', { draining: true });
  t.equal(drained.status, 200);
  await page.locator('#draining').waitFor({ state: 'visible' });
  t.match(await page.locator('#capacity').textContent(), /0 free slots/, 'draining: no free slot');
  await page.screenshot({ path: path.join(screenshots, '5-capacity-chart-draining.png'), fullPage: true });
  await apiRequest(connection, 'POST', '/api/drain', { draining: false });
  await page.locator('#draining').waitFor({ state: 'hidden' });
  // A fresh load draws the same bars from the event history, not the stream.
  await page.reload();
  await page.locator('#chart g[data-bucket="11"][data-turns="1"][data-denials="1"]').waitFor();
  await page.locator('#connection.live').waitFor();

  fs.writeFileSync(path.join(workspace, 'stop'), '');
  await row.waitFor({ state: 'detached' });
  t.ok(await page.locator('#no-running-turns').isVisible(), 'the turn is gone once it ended');
  t.ok(await page.locator('#events li[data-kind="worker_exit"]').count(), 'its worker_exit is in the live events');
  await page.screenshot({ path: path.join(screenshots, '3-turn-ended.png'), fullPage: true });
  await page.close();
});

t.test("the sign-in names this server's token file; the root-server warning and sizes in human units", async (t) => {
  const own = await daemon('own-token', {}, false, { tokenFile: true });
  const tokenFile = path.join(dir, 'own-token', 'api-token');
  const page = await context.newPage();
  await page.goto(`${base(own)}/ui/login`);
  t.equal(await page.locator('#token-file').textContent(), tokenFile, "the form names this server's token file");
  t.notMatch(await page.locator('#token-hint').textContent(), /\/var\/lib\/turnhost/, 'not the packaged path');
  // The file the form names holds the token that signs in.
  await signIn(page, base(own), fs.readFileSync(tokenFile, 'utf8').trim());

  const status = (await apiRequest(
    {
      target: { kind: 'tcp', host: '127.0.0.1', port: own.http.tcp!.port },
      token: fs.readFileSync(tokenFile, 'utf8').trim(),
    },
    'GET',
    '/api/status',
  )) as { body: { runtime: { workerHost: { rootServer?: { warning: string } } | null } } };
  const warning = status.body.runtime.workerHost?.rootServer?.warning;
  t.ok(warning, 'a root supervisor has a root-server warning');
  const shown = page.locator('#root-server');
  await shown.waitFor({ state: 'visible' });
  t.equal(await shown.textContent(), `Root server: ${warning}`, 'the warning, verbatim');

  const tmpSize = page.locator('#limits tbody tr', { hasText: 'tmp_size' });
  await tmpSize.waitFor();
  t.match(await tmpSize.textContent(), /tmp_size\s*enforced\s*512 MiB/, 'tmp_size in MiB, not bytes');
  t.notMatch(await tmpSize.textContent(), /536870912/);
  await page.screenshot({ path: path.join(screenshots, '4-root-warning-and-sizes.png'), fullPage: true });
  await page.close();
});

t.test('the attested boundary lists every case of the last attack run', async (t) => {
  const workspace = path.join(dir, 'attack-workspace');
  fs.mkdirSync(workspace, { mode: 0o777 });
  fs.chmodSync(workspace, 0o777);
  const attacked = await daemon('attack', { turns: { workspaceRoots: [workspace], preparedWorkers: 0 } }, true);
  const page = await context.newPage();
  await signIn(page, base(attacked));
  const summary = page.locator('#attested-summary');
  await summary.waitFor();
  t.match(await summary.textContent(), /No attack run yet/);
  const connection = {
    target: { kind: 'tcp' as const, host: '127.0.0.1', port: attacked.http.tcp!.port },
    token: TOKEN,
  };
  const answer = (await apiRequest(connection, 'POST', '/api/status/worker-host', { attack: true })) as {
    status: number;
    body: { attested?: { cases: Array<{ result: string }> } };
  };
  t.equal(answer.status, 200);
  await page.reload();
  await page.locator('#attested tbody tr').first().waitFor();
  t.equal(await page.locator('#attested tbody tr').count(), answer.body.attested?.cases.length, 'a row per case');
  t.match(await summary.textContent(), /Attacked at .*: \d+ held, 0 broken, \d+ skipped\./);
  t.match(
    await page.locator('#attested tbody tr', { hasText: 'seccomp.ptrace' }).textContent(),
    /ordinary\s*seccomp\.ptrace\s*held\s*EPERM/,
  );
  await page.screenshot({ path: path.join(screenshots, '5-attested-boundary.png'), fullPage: true });
  await page.close();
});

t.test('every API answer and message the page received matches the OpenAPI document', async (t) => {
  await Promise.all(browserChecks);
  t.ok(checkedAnswers > 0 && checkedMessages > 0, `${checkedAnswers} answers, ${checkedMessages} messages checked`);
  t.same(browserProblems, []);
});
