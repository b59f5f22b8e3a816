// VM tier, hosting template (run only by run-hosting.sh, once per boot): Debian's cloud-init ran
// packaging/hosting/cloud-init.yaml from a NoCloud seed. The phase (/etc/turnhost-vmtest/phase)
// says what this boot's seed changed:
//   fresh    the template installed the deb and started a checked host
//   change   TURNHOST_MAX_TURNS 3 -> 5: only turns.maxConcurrent changed
//   failing  TURNHOST_WORKSPACE_ROOT=/srv (root's, 0755): the check fails, so does cloud-init
// In fresh and change the host runs its own checks through the forwarded API port
// (hosting-host.mjs) between this file's "guest-ready" and the host's "host-done" markers.
import fs from 'node:fs';
import { check, comment, expect, finish } from './tap.mjs';
import { expectSuccess, run, waitFor } from './client.mjs';

const PHASE = fs.readFileSync('/etc/turnhost-vmtest/phase', 'utf8').trim();
const RESULTS = '/vmresults';
const UNIT = 'turnhost.service';
const CONFIG = '/etc/turnhost/turnhost.json';
const TOKEN_SOURCE = '/etc/turnhost-secrets/api-token';
/** What the fresh boot left, for the change boot to compare against (on the 9p root: kept). */
const SNAPSHOT_DIR = '/var/lib/turnhost-vmtest/after-fresh';
/** Files the template writes, besides the configuration. */
const TEMPLATE_FILES = [
  '/etc/turnhost/identity-helper.conf',
  '/etc/subuid',
  '/etc/subgid',
  '/etc/systemd/system/turnhost.service.d/hosting.conf',
  '/etc/turnhost/hosting.env',
];

/** cloud-init's verdict on this boot, once it has finished: { code, status }. */
function cloudInitResult() {
  const result = run(['cloud-init', 'status', '--wait', '--format', 'json']);
  let status;
  try {
    status = JSON.parse(result.stdout);
  } catch {
    status = { unparsed: result.stdout.slice(-2000), stderr: result.stderr.slice(-2000) };
  }
  return { code: result.code, status };
}

/** The template's own lines (`turnhost-hosting: ...`) in this boot's part of cloud-init's output log. */
function templateLinesOfThisBoot() {
  const log = fs.readFileSync('/var/log/cloud-init-output.log', 'utf8');
  // cloud-init appends per boot; each boot's part starts with its init stage's banner.
  const starts = [...log.matchAll(/^Cloud-init v\. .* running 'init-local'/gm)];
  const part = starts.length === 0 ? log : log.slice(starts.at(-1).index);
  return part.split('\n').filter((line) => line.includes('turnhost-hosting:'));
}

function checkReport() {
  const result = run(['turnhost', 'check', '--json']);
  try {
    return { code: result.code, body: JSON.parse(result.stdout) };
  } catch {
    return { code: result.code, body: null, stdout: result.stdout.slice(-2000), stderr: result.stderr.slice(-2000) };
  }
}

const readJson = (file) => JSON.parse(fs.readFileSync(file, 'utf8'));

/** Paths (a.b.c) whose values differ between two JSON values. */
function changedPaths(before, after, prefix = '') {
  const isObject = (value) => typeof value === 'object' && value !== null && !Array.isArray(value);
  if (!isObject(before) || !isObject(after))
    return JSON.stringify(before) === JSON.stringify(after) ? [] : [prefix || '(root)'];
  const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
  return [...keys].flatMap((key) => changedPaths(before[key], after[key], prefix ? `${prefix}.${key}` : key));
}

const turnhostInstalls = () =>
  fs
    .readFileSync('/var/log/dpkg.log', 'utf8')
    .split('\n')
    .filter((line) => / status installed turnhost:/.test(line)).length;

/** Lets the host run its checks through the forwarded port, and waits until it has. */
async function handOverToHost() {
  fs.writeFileSync(`${RESULTS}/guest-ready-${PHASE}`, '');
  await waitFor(`the host's checks (${RESULTS}/host-done-${PHASE})`, 900, () =>
    fs.existsSync(`${RESULTS}/host-done-${PHASE}`),
  );
}

async function checkedHost() {
  await check('turnhost.service is enabled and active', () => {
    expectSuccess(['systemctl', 'is-enabled', '--quiet', UNIT]);
    expectSuccess(['systemctl', 'is-active', '--quiet', UNIT]);
  });

  await check('turnhost check --json: ordinary and workspace turns available, separate_uid, cgroup v2 limits', () => {
    const report = checkReport();
    expect(report.code === 0 && report.body !== null, `turnhost check exited ${report.code}`, report);
    const body = report.body;
    expect(body.ordinary?.available === true, 'ordinary is unavailable', { ordinary: body.ordinary });
    expect(body.workspaceTurns?.available === true, 'workspace turns are unavailable', {
      workspaceTurns: body.workspaceTurns,
    });
    expect(body.identity === 'separate_uid', `identity ${body.identity}`);
    expect(body.uidRange?.count === 1000, `uid range ${JSON.stringify(body.uidRange)}, not TURNHOST_UID_COUNT=1000`);
    for (const limit of ['memory', 'pids', 'cpu']) {
      const enforced = body.limits.enforced.find((entry) => entry.limit === limit);
      expect(
        enforced?.source === 'cgroup' && enforced.backend === 'cgroup_v2',
        `${limit} is not enforced by cgroup v2`,
        {
          limits: body.limits,
        },
      );
    }
    expect(body.workspaceCap?.enforced === true && body.workspaceCap.maxBytes === 67108864, 'the workspace cap', {
      workspaceCap: body.workspaceCap,
    });
  });
}

async function freshBoot() {
  await check('cloud-init finished without an error, the template ran to its end', () => {
    const { code, status } = cloudInitResult();
    expect(code === 0 && status.status === 'done', `cloud-init status exited ${code}`, { status });
    const lines = templateLinesOfThisBoot();
    expect(
      lines.some((line) => /installing turnhost /.test(line)),
      'the template did not install turnhost',
      { lines },
    );
    expect(lines.at(-1)?.endsWith('turnhost-hosting: done'), 'the template did not finish', { lines });
    comment(lines.join('\n'));
  });

  await check('the variables reached the configuration, the uid range, the workspace root and the token', () => {
    const config = readJson(CONFIG);
    expect(config.listen.tcp === '0.0.0.0:7707' && config.listen.allowNonLoopback === true, 'listen', config.listen);
    expect(
      config.workspaces.root === '/srv/hosting-workspaces' && config.workspaces.maxBytes === 67108864,
      'workspaces',
      config.workspaces,
    );
    expect(config.turns.maxConcurrent === 3, 'turns', config.turns);
    expect(config.limits.memory === '256M' && config.limits.pids === 256, 'limits', config.limits);
    expect(config.metrics?.listen === null, 'metrics', config.metrics);
    expect(/^turnhost:\d+:1000$/m.test(fs.readFileSync('/etc/subuid', 'utf8')), '/etc/subuid has no 1000-uid range');
    const root = fs.statSync('/srv/hosting-workspaces');
    expect(root.isDirectory() && (root.mode & 0o7777) === 0o711, 'the workspace root is not a 0711 directory');
    const token = run([
      'setpriv',
      '--reuid=turnhost',
      '--regid=turnhost',
      '--clear-groups',
      'cat',
      '/var/lib/turnhost/api-token',
    ]);
    expect(
      token.stdout === fs.readFileSync(TOKEN_SOURCE, 'utf8'),
      'the API token is not the one from TURNHOST_TOKEN_SOURCE',
    );
  });

  await checkedHost();

  await check('the unit started once, with the configuration of the variables, never the packaged one', () => {
    const starts = expectSuccess(['journalctl', '-b', '-u', UNIT, '-o', 'cat', '--no-pager'])
      .stdout.split('\n')
      .filter((line) => /^Started turnhost\.service/.test(line));
    expect(starts.length === 1, `turnhost.service started ${starts.length} times in this boot`, { starts });
    expect(!fs.existsSync('/usr/sbin/policy-rc.d'), 'the template left its policy-rc.d behind');
  });

  await check('the host ran its turn through the API', async () => {
    await handOverToHost();
  });

  // What the change boot compares against.
  fs.rmSync(SNAPSHOT_DIR, { recursive: true, force: true });
  fs.mkdirSync(SNAPSHOT_DIR, { recursive: true });
  for (const file of [CONFIG, ...TEMPLATE_FILES]) fs.copyFileSync(file, `${SNAPSHOT_DIR}/${file.replaceAll('/', '_')}`);
  fs.writeFileSync(`${SNAPSHOT_DIR}/installs`, String(turnhostInstalls()));
}

async function changeBoot() {
  await check('cloud-init ran the template again: it wrote only the configuration', () => {
    const { code, status } = cloudInitResult();
    expect(code === 0 && status.status === 'done', `cloud-init status exited ${code}`, { status });
    const lines = templateLinesOfThisBoot();
    const actions = lines.filter((line) => !/already installed|turnhost check: ordinary available|: done$/.test(line));
    expect(
      actions.length === 1 && actions[0].endsWith(`wrote ${CONFIG}`),
      'the template did more than write the configuration',
      { lines },
    );
    expect(
      lines.some((line) => /already installed/.test(line)),
      'the template did not find turnhost installed',
      { lines },
    );
    comment(lines.join('\n'));
  });

  await check('only turns.maxConcurrent changed; the package was not installed again', () => {
    const before = readJson(`${SNAPSHOT_DIR}/${CONFIG.replaceAll('/', '_')}`);
    const after = readJson(CONFIG);
    const changed = changedPaths(before, after);
    expect(changed.length === 1 && changed[0] === 'turns.maxConcurrent', `changed: ${changed.join(', ')}`);
    expect(after.turns.maxConcurrent === 5, `turns.maxConcurrent is ${after.turns.maxConcurrent}`);
    for (const file of TEMPLATE_FILES.filter((name) => name !== '/etc/turnhost/hosting.env')) {
      const was = fs.readFileSync(`${SNAPSHOT_DIR}/${file.replaceAll('/', '_')}`, 'utf8');
      expect(fs.readFileSync(file, 'utf8') === was, `${file} changed`);
    }
    const installs = Number(fs.readFileSync(`${SNAPSHOT_DIR}/installs`, 'utf8'));
    expect(turnhostInstalls() === installs, 'dpkg installed turnhost again');
  });

  await checkedHost();

  await check('the host saw the new capacity and ran a turn again', async () => {
    await handOverToHost();
  });
}

async function failingBoot() {
  await check('cloud-init reports an error, and its log says why: the failed check', () => {
    const { code, status } = cloudInitResult();
    expect(code !== 0 && status.status === 'error', `cloud-init status exited ${code}`, { status });
    const errors = JSON.stringify(status.errors ?? status);
    expect(/scripts_user|runcmd|scripts-user/.test(errors), 'the error does not name the user scripts', { status });
    const lines = templateLinesOfThisBoot();
    const failed = lines.find((line) => line.includes('FAILED'));
    expect(
      failed !== undefined &&
        failed.includes('turnhost check') &&
        failed.includes('/srv (workspaces.root) is not writable by the supervisor'),
      'the log does not carry the check failure',
      { lines },
    );
    comment(failed);
  });

  await check('the unit runs and turnhost check says workspace turns are unavailable, naming the root', () => {
    expectSuccess(['systemctl', 'is-active', '--quiet', UNIT]);
    const report = checkReport();
    expect(report.body?.workspaceTurns?.available === false, 'workspace turns are available', report);
    expect(/\/srv/.test(report.body.workspaceTurns.requirement), 'the requirement does not name /srv', {
      workspaceTurns: report.body.workspaceTurns,
    });
  });
}

comment(`phase ${PHASE}`);
if (PHASE === 'fresh') await freshBoot();
else if (PHASE === 'change') await changeBoot();
else if (PHASE === 'failing') await failingBoot();
else await check(`a known phase`, () => expect(false, `unknown phase ${PHASE}`));
finish();
