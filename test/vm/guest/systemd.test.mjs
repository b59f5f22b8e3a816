// VM tier: the supervisor as a systemd service. Type=notify (active only once it listens),
// the watchdog, `systemctl reload` with a changed allowlist that the next turn obeys, journald
// priorities (`journalctl -p warning` shows the warnings, not the info lines) and governance
// events as structured journal entries (events.journal). Runs after status.test.mjs.
import fs from 'node:fs';
import { check, comment, expect, finish } from './tap.mjs';
import {
  BASE_URL,
  SERVICE,
  api,
  createTurn,
  serviceMainPid,
  sh,
  turnEvents,
  waitFor,
  waitForSupervisor,
  waitForTurnState,
} from './client.mjs';

const CONFIG = '/etc/turnhost/turnhost.json';
const original = fs.readFileSync(CONFIG, 'utf8');
const show = (property) => sh(`systemctl show -p ${property} --value ${SERVICE}`).trim();
const journal = (args) =>
  sh(`journalctl -u ${SERVICE} --no-pager -o json ${args}`)
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line));
const messageOf = (entry) => {
  const text = Array.isArray(entry.MESSAGE) ? Buffer.from(entry.MESSAGE).toString('utf8') : String(entry.MESSAGE);
  return text;
};

// A CONNECT through the turn's proxy, with bash's /dev/tcp (no curl in the guest image).
const CONNECT_ALLOWED_EXAMPLE = [
  '/bin/bash',
  '-c',
  'p=${HTTP_PROXY##*:}; p=${p%/}; exec 3<>/dev/tcp/127.0.0.1/$p; ' +
    'printf "CONNECT allowed.example:443 HTTP/1.1\\r\\nHost: allowed.example:443\\r\\n\\r\\n" >&3; ' +
    'timeout 30 head -c 300 <&3; true',
];

async function egressOfTurn(name) {
  const created = await createTurn({ turnId: `vm-${name}-${Date.now().toString(36)}`, argv: CONNECT_ALLOWED_EXAMPLE });
  const turn = await waitForTurnState(created.id, 'finished', 240);
  const events = (await turnEvents(turn.id)).filter((event) => event.kind.startsWith('egress_'));
  comment(
    `${name}: ${turn.result.status}; ${JSON.stringify(events.map((e) => [e.kind, e.payload.reason ?? e.payload.outcome]))}`,
  );
  return { turn, events };
}

await waitForSupervisor();
let firstTurnId = null;

await check('the unit is Type=notify and systemd shows the probe summary as its status', () => {
  expect(show('Type') === 'notify', `Type=${show('Type')}`);
  expect(show('ActiveState') === 'active', `ActiveState=${show('ActiveState')}`);
  const status = show('StatusText');
  expect(/^serving; ordinary available/.test(status), 'StatusText does not say ordinary is available', { status });
  comment(`StatusText: ${status}`);
});

await check('systemctl restart returns once the supervisor listens: /api/health answers at the first try', async () => {
  const restarted = sh(`systemctl restart ${SERVICE} 2>&1; echo "exit $?"`);
  expect(restarted.trim().endsWith('exit 0'), 'systemctl restart failed', { restarted });
  expect(show('ActiveState') === 'active', `ActiveState=${show('ActiveState')} right after restart`);
  const response = await fetch(`${BASE_URL}/api/health`);
  expect(response.ok, `GET /api/health answered ${response.status} right after the unit became active`);
});

await check('the watchdog is armed and pinged', async () => {
  expect(show('WatchdogUSec') === '1min', `WatchdogUSec=${show('WatchdogUSec')}`);
  const first = show('WatchdogTimestampMonotonic');
  await waitFor(
    'a second WATCHDOG=1 (every 30 s)',
    75,
    () => (show('WatchdogTimestampMonotonic') !== first ? true : undefined),
    2000,
  );
});

await check('a turn under the startup allowlist (empty) is denied allowed.example: not_allowlisted', async () => {
  const { turn, events } = await egressOfTurn('before-reload');
  firstTurnId = turn.id;
  expect(
    events.some(
      (e) =>
        e.kind === 'egress_denial' && e.payload.host === 'allowed.example' && e.payload.reason === 'not_allowlisted',
    ),
    'no not_allowlisted denial',
    { events },
  );
});

await check('systemctl reload with allowed.example added: same process, status live, the next turn obeys', async () => {
  const pid = serviceMainPid();
  const config = JSON.parse(original);
  config.egress = { ...(config.egress ?? {}), allowlist: ['allowed.example'] };
  config.fs = { hostWriteMaxBytes: 1048576 }; // bound at boot: logged as waiting for a restart (a warning)
  fs.writeFileSync(CONFIG, JSON.stringify(config, null, 2));
  const reloaded = sh(`systemctl reload ${SERVICE} 2>&1; echo "exit $?"`);
  expect(reloaded.trim().endsWith('exit 0'), 'systemctl reload failed', { reloaded });
  await waitFor('status to describe the reloaded configuration', 120, async () => {
    const status = await api('GET', '/api/status');
    return status.body.runtime?.workerHost?.governed?.configurationView === 'live' ? true : undefined;
  });
  expect(serviceMainPid() === pid, 'the supervisor was restarted instead of reloaded');
  expect(show('ActiveState') === 'active', `ActiveState=${show('ActiveState')}`);
  const { events } = await egressOfTurn('after-reload');
  expect(
    !events.some((e) => e.kind === 'egress_denial' && e.payload.reason === 'not_allowlisted'),
    'the turn after the reload was still refused by the old allowlist',
    { events },
  );
  expect(events.length > 0, 'the turn made no egress attempt at all', { events });
});

await check('journalctl -p warning shows the warnings only; the info lines carry priority 6', () => {
  const warnings = journal('-p warning').filter((e) => e._COMM === 'node');
  const all = journal('').filter((e) => e._COMM === 'node');
  const texts = warnings.map(messageOf);
  expect(
    texts.some((text) => text.includes('configuration changes wait for a restart')),
    'the reload warning is not at warning priority',
    { texts: texts.slice(-10) },
  );
  expect(
    !texts.some((text) => text.includes('"msg":"listening"') || text.includes('"msg":"http request"')),
    'info lines pass -p warning',
    {
      texts: texts.slice(-10),
    },
  );
  const listening = all.find((e) => messageOf(e).includes('"msg":"listening"'));
  expect(listening?.PRIORITY === '6', `the listening line has PRIORITY=${listening?.PRIORITY}`);
  expect(
    all.every((e) => !messageOf(e).startsWith('<')),
    'a priority prefix was left in a message',
  );
  comment(`node lines: ${all.length}, of which at warning or above: ${warnings.length}`);
});

await check('governance events are structured journal entries (events.journal)', () => {
  const entries = sh(`journalctl --no-pager -o json TURNHOST_TURN=${firstTurnId}`)
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line));
  const kinds = entries.map((e) => e.TURNHOST_KIND);
  expect(kinds.includes('worker_launch') && kinds.includes('worker_exit'), 'missing worker events', { kinds });
  const denial = entries.find((e) => e.TURNHOST_KIND === 'egress_denial');
  expect(denial?.TURNHOST_PAYLOAD_HOST === 'allowed.example' && denial?.PRIORITY === '4', 'no denial entry', {
    denial,
  });
  expect(denial?.TURNHOST_SESSION === 'vm-tier' && denial?.SYSLOG_IDENTIFIER === 'turnhost', 'envelope fields', {
    denial,
  });
  expect(JSON.parse(denial.TURNHOST_PAYLOAD).reason === 'not_allowlisted', 'payload JSON', { denial });
});

await check('GET /metrics counts the turns and the reload', async () => {
  const token = fs.readFileSync('/var/lib/turnhost/api-token', 'utf8').trim();
  const response = await fetch(`${BASE_URL}/metrics`, { headers: { authorization: `Bearer ${token}` } });
  const text = await response.text();
  expect(response.ok, `/metrics answered ${response.status}`);
  expect(/^turnhost_config_reloads_total\{result="applied"\} [1-9]/m.test(text), 'no applied reload', {
    text: text.slice(0, 3000),
  });
  expect(/^turnhost_egress_denials_total\{reason="not_allowlisted"\} [1-9]/m.test(text), 'no denial counted');
  expect(/^turnhost_worker_host_mode_available\{mode="ordinary"\} 1$/m.test(text), 'ordinary not available');
});

// The following files expect the original configuration.
const reloadsSoFar = () => journal('').filter((e) => messageOf(e).includes('"msg":"configuration reloaded"')).length;
const before = reloadsSoFar();
fs.writeFileSync(CONFIG, original);
sh(`systemctl reload ${SERVICE}`);
await waitFor('the restored configuration to be reloaded', 120, () => (reloadsSoFar() > before ? true : undefined));

finish();
