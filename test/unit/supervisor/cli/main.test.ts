/**
 * `turnhost run`'s flags as the turn request the server gets: the server never sees this
 * shell's directory, so the working directory is always sent absolute.
 */
import t from 'tap';
import { buildTurnRequest } from '../../../../supervisor/cli/main.js';

t.test('--cwd is resolved against the shell directory; no --cwd is the shell directory', async (t) => {
  t.equal(buildTurnRequest({ cwd: 'ws/sub' }, ['true'], '/home/me').cwd, '/home/me/ws/sub');
  t.equal(buildTurnRequest({ cwd: '../other' }, ['true'], '/home/me').cwd, '/home/other');
  t.equal(buildTurnRequest({ cwd: '/srv/ws/' }, ['true'], '/home/me').cwd, '/srv/ws');
  t.equal(buildTurnRequest({}, ['true'], '/home/me').cwd, '/home/me');
});

t.test('a missing command and a bad mode are usage errors naming the flag', async (t) => {
  t.throws(() => buildTurnRequest({}, [], '/'), /missing the command/);
  t.throws(() => buildTurnRequest({ mode: 'root' }, ['true'], '/'), /--mode: expected ordinary or restricted/);
});
