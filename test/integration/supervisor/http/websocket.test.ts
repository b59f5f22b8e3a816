/**
 * Requests that carry an Upgrade header reach the upgrade handler, outside express, before
 * authentication: whatever they hold, each gets a JSON refusal with its request id, and the
 * daemon lives on. Written as raw bytes, since no WebSocket client sends these.
 */
import net from 'node:net';
import t from 'tap';
import { contractProblems } from '../../../support/api-contract.js';
import { startTestServer, TOKEN } from '../../../support/app-server.js';

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  json: any;
}

/** Sends `head` as it is and reads the answer until the server closes. */
function raw(port: number, head: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const [top = '', body = ''] = text.split('\r\n\r\n');
      const [statusLine = '', ...lines] = top.split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines)
        headers[line.slice(0, line.indexOf(':')).toLowerCase()] = line.slice(line.indexOf(':') + 1).trim();
      let json: unknown = null;
      try {
        json = JSON.parse(body);
      } catch {
        json = body;
      }
      resolve({ status: Number(statusLine.split(' ')[1]), headers, json });
    });
    socket.end(head);
  });
}

const KEY = 'dGhlIHNhbXBsZSBub25jZQ==';
const upgrade = (target: string, extra: string[] = []): string =>
  [`GET ${target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: Upgrade', ...extra, '', ''].join('\r\n');

t.test('upgrade requests: malformed ones are refused in JSON with an id; the daemon lives on', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const port = s.server.tcp!.port;
  const ws = ['Upgrade: websocket', `Sec-WebSocket-Key: ${KEY}`, 'Sec-WebSocket-Version: 13'];
  const auth = `Authorization: Bearer ${TOKEN}`;
  const cases: Array<{ name: string; head: string; path: string; field?: string; error: RegExp }> = [
    {
      name: 'a request target URL cannot parse',
      head: upgrade('//a:b', ws),
      path: '//a:b',
      error: /^url: /,
    },
    {
      name: 'another protocol (h2c)',
      head: upgrade('/api/status', ['Upgrade: h2c', 'HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA', auth]),
      path: '/api/status',
      field: 'upgrade',
      error: /^upgrade: /,
    },
    {
      name: 'no key',
      head: upgrade('/api/governance/events/stream', ['Upgrade: websocket', 'Sec-WebSocket-Version: 13', auth]),
      path: '/api/governance/events/stream',
      field: 'sec-websocket-key',
      error: /^sec-websocket-key: /,
    },
    {
      name: 'an old version',
      head: upgrade('/api/governance/events/stream', [
        'Upgrade: websocket',
        `Sec-WebSocket-Key: ${KEY}`,
        'Sec-WebSocket-Version: 7',
        auth,
      ]),
      path: '/api/governance/events/stream',
      field: 'sec-websocket-version',
      error: /^sec-websocket-version: /,
    },
    {
      name: 'a malformed subprotocol list (found by ws)',
      head: upgrade('/api/governance/events/stream', [...ws, 'Sec-WebSocket-Protocol: a,,b', auth]),
      path: '/api/governance/events/stream',
      error: /^websocket handshake: /,
    },
  ];
  for (const c of cases) {
    const answer = await raw(port, c.head);
    t.equal(answer.status, 400, c.name);
    t.match(answer.json, { code: 'invalid_request', error: c.error, ...(c.field ? { field: c.field } : {}) }, c.name);
    t.match(answer.headers['x-request-id'], /^[0-9a-f-]{36}$/, `${c.name}: the refusal carries an id`);
    t.same(
      contractProblems('GET', c.path, answer.status, answer.headers, JSON.stringify(answer.json)),
      [],
      `${c.name}: the refusal is one the document allows`,
    );
  }
  const after = await s.request('GET', '/api/status');
  t.equal(after.status, 200, 'the daemon still answers');
  const logged = s.lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'websocket upgrade');
  t.equal(logged.length, cases.length, 'each refusal is logged');
});
