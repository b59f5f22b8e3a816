/**
 * Measuring a large workspace never stalls the supervisor: a shared_uid turn leaves 200,000
 * empty files in its workspace; while a GET of that workspace measures them, `GET /api/health`
 * sent after it answers first. The assertion is on order, never on time. A real `turnhost
 * serve`, the requests over its unix socket.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import t from 'tap';
import { startSupervisor, stopSupervisors } from '../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';

stopTapInjectingIntoChildren();

const FILES = 200_000;
const supervisor = await startSupervisor({ name: 'usage-latency', workspaces: true });
t.teardown(() => stopSupervisors([supervisor]));

const MANY_FILES = `
import os, sys
for d in range(100):
    os.mkdir(f'd{d}')
    for i in range(int(sys.argv[1]) // 100):
        os.close(os.open(f'd{d}/f{i}', os.O_WRONLY | os.O_CREAT, 0o600))
print('made', flush=True)
`;

/** A GET; `sent` resolves once the whole request is handed to the socket. */
function get(
  url: string,
  token: string | null,
): { sent: Promise<void>; answer: Promise<{ status: number; body: string }> } {
  let markSent: () => void = () => undefined;
  const sent = new Promise<void>((resolve) => (markSent = resolve));
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const request = http.request(
      {
        socketPath: supervisor.serverSocket,
        method: 'GET',
        path: url,
        headers: token === null ? {} : { authorization: `Bearer ${token}` },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      },
    );
    request.on('error', reject);
    request.on('finish', markSent);
    request.end();
  });
  return { sent, answer };
}

t.test('shared_uid: health answers while 200,000 files are measured', async (t) => {
  const token = fs.readFileSync(path.join(supervisor.dataDir, 'api-token'), 'utf8').trim();
  t.equal((await supervisor.cli(['workspace', 'create', 'many'])).code, 0);
  const made = await supervisor.cli([
    'run',
    '--workspace',
    'many',
    '--',
    '/usr/bin/python3',
    '-c',
    MANY_FILES,
    String(FILES),
  ]);
  t.equal(made.code, 0, made.stderr);
  t.equal(made.stdout, 'made\n');

  const order: string[] = [];
  const measuring = get('/api/workspaces/many', token);
  const measured = measuring.answer.then((answer) => {
    order.push('workspace');
    return answer;
  });
  // The measuring request is on its way first: health is asked only once it was sent whole.
  await measuring.sent;
  const health = get('/api/health', null).answer.then((answer) => {
    order.push('health');
    return answer;
  });
  const [workspace, healthy] = await Promise.all([measured, health]);
  t.equal(healthy.status, 200, healthy.body);
  t.equal(workspace.status, 200, workspace.body);
  t.equal(JSON.parse(workspace.body).workspace.files, FILES, 'every file was counted');
  t.same(order, ['health', 'workspace'], 'health answered before the measurement completed');
});
