// The host's side of a vm-hosting-test boot (run-hosting.sh starts it beside qemu): once the
// guest says its host is checked (RESULTS/guest-ready-PHASE), talks to the guest's API through
// qemu's forwarded loopback port with curl, as a host application placing turns would, then
// lets the guest finish (RESULTS/host-done-PHASE). TAP on stdout.
// Usage: node hosting-host.mjs PHASE BASE_URL TOKEN RESULTS_DIR
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { check, comment, expect, finish } from './guest/tap.mjs';

const [phase, baseUrl, token, results] = process.argv.slice(2);
const EXPECTED_MAX_TURNS = { fresh: 3, change: 5 };

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits for the guest's go-ahead; false when the guest powered off without giving it. */
async function guestReady() {
  for (;;) {
    if (fs.existsSync(`${results}/guest-ready-${phase}`)) return true;
    if (fs.existsSync(`${results}/guest-gone-${phase}`)) return false;
    await sleep(1000);
  }
}

/** One request with curl: { status, body (parsed JSON or text) }. */
function curl(method, path, { auth = true, body } = {}) {
  const argv = ['-sS', '--max-time', '200', '-X', method, '-w', '\n%{http_code}', `${baseUrl}${path}`];
  if (auth) argv.push('-H', `Authorization: Bearer ${token}`);
  if (body !== undefined) argv.push('-H', 'Content-Type: application/json', '--data-binary', JSON.stringify(body));
  const result = spawnSync('curl', argv, { encoding: 'utf8' });
  expect(result.status === 0, `curl ${method} ${path} exited ${result.status}`, { stderr: result.stderr });
  const cut = result.stdout.lastIndexOf('\n');
  const text = result.stdout.slice(0, cut);
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Not JSON (turn output): kept as text.
  }
  return { status: Number(result.stdout.slice(cut + 1)), body: parsed };
}

async function hostChecks() {
  const maxTurns = EXPECTED_MAX_TURNS[phase];
  await check(`GET /api/ready from the host: ready, ${maxTurns} free slots`, () => {
    const ready = curl('GET', '/api/ready', { auth: false });
    expect(ready.status === 200 && ready.body.status === 'ready', `ready answered ${ready.status}`, {
      body: ready.body,
    });
    const capacity = ready.body.capacity;
    expect(capacity?.maxTurns === maxTurns && capacity.freeSlots === maxTurns, 'capacity', { capacity });
  });

  await check('the API refuses the host without the token', () => {
    const refused = curl('GET', '/api/status', { auth: false });
    expect(refused.status === 401, `GET /api/status without a token answered ${refused.status}`);
  });

  await check('a turn through the API from the host: a workspace, run and wait, its output and its file', () => {
    const status = curl('GET', '/api/status');
    expect(status.status === 200, `status answered ${status.status}`, { body: status.body });
    const range = status.body.runtime?.workerHost?.uidRange;
    const created = curl('POST', '/api/workspaces', { body: { id: `hosting-${phase}` } });
    expect(created.status === 201, `creating a workspace answered ${created.status}`, { body: created.body });
    const id = created.body.workspace?.id;
    const turn = curl('POST', '/api/turns?wait=180', {
      body: {
        sessionId: `hosting-${phase}`,
        mode: 'ordinary',
        workspace: id,
        argv: ['sh', '-c', 'id -u; echo hosted > made-by-turn'],
      },
    });
    expect(turn.status === 201 || turn.status === 200, `the turn answered ${turn.status}`, { body: turn.body });
    const record = turn.body.turn;
    expect(record?.state === 'finished' && record.result?.status === 'ok', 'the turn did not finish ok', { record });
    const output = curl('GET', `/api/turns/${record.id}/output?stream=stdout`);
    const uid = Number(String(output.body).trim());
    expect(
      range !== undefined && uid >= range.first && uid < range.first + range.count,
      `the turn ran as uid ${String(output.body).trim()}`,
      { range },
    );
    const file = curl('GET', `/api/workspaces/${id}/files?path=made-by-turn`);
    expect(file.status === 200 && file.body === 'hosted\n', `the turn's file: ${file.status}`, { body: file.body });
    comment(`turn ${record.id} ran as uid ${uid} in workspace ${id}`);
  });
}

if (await guestReady()) {
  await hostChecks();
} else {
  await check('the guest got ready for the host', () => expect(false, 'the guest powered off without its go-ahead'));
}
fs.writeFileSync(`${results}/host-done-${phase}`, '');
finish();
