import t from 'tap';
import { EVENT_KINDS } from '../../../supervisor/events/kinds.js';
import { connectionEvent, denialEvent, recordedAuthority, visiblePath } from '../../../proxy/events.js';

const turn = { sessionId: 's', turnId: 't', profile: 'governed' as const, model: null };

t.test('paths lose query and fragment; refused authorities lose path, query and userinfo', async (t) => {
  t.equal(visiblePath('/a/b?token=secret#frag'), '/a/b');
  t.equal(visiblePath('/a#frag?x'), '/a');
  t.equal(visiblePath('?only=query'), '/');
  t.equal(visiblePath(`/${'x'.repeat(5000)}`).length, 2048);
  t.equal(recordedAuthority('user:secret@evil.test:80/path?q=secret'), 'evil.test:80');
  t.equal(recordedAuthority('evil\0.test\r\n:443'), 'evil\\x00.test\\x0d\\x0a:443');
  t.equal(recordedAuthority('a'.repeat(1000)).length, 255);
});

t.test('payloads satisfy the registered kinds', async (t) => {
  const connection = connectionEvent(turn, {
    host: 'api.anthropic.com',
    port: 443,
    method: null,
    path: null,
    bytesUp: 1,
    bytesDown: 2,
    durationMs: 3,
    outcome: 'ok',
    scope: 'inference',
    broker: 'claude',
    status: 200,
  });
  t.equal(connection.actor, 'server');
  t.equal(connection.payload.inference, true);
  t.ok(EVENT_KINDS.get('egress_connection')!.validate(connection.payload).ok);
  const denial = denialEvent(turn, { host: '', port: null, reason: 'peer_refused' });
  t.ok(EVENT_KINDS.get('egress_denial')!.validate(denial.payload).ok);
  t.same(Object.keys(connection.payload).sort(), [
    'broker',
    'bytesDown',
    'bytesUp',
    'durationMs',
    'host',
    'inference',
    'method',
    'outcome',
    'path',
    'port',
    'scope',
    'status',
  ]);
});
