import t from 'tap';
import {
  encodeMessage,
  LineDecoder,
  MAX_LINE_BYTES,
  parseSupervisorMessage,
  parseWorkerMessage,
} from '../../../../supervisor/turns/worker-protocol.js';
import { workerSeccompMessage } from '../../../../supervisor/turns/worker-seccomp.js';

const launch = { type: 'launch', v: 1, argv: ['/bin/true'], cwd: '/', env: { PATH: '/bin' }, tty: null, egress: false };
const reason = (r: { ok: boolean; reason?: string; detail?: string }): string =>
  r.ok ? 'ok' : `${r.reason}: ${r.detail}`;

t.test('launch round-trips and is validated strictly', async (t) => {
  const encoded = encodeMessage(launch as never);
  if (!encoded.ok) throw new Error(encoded.detail);
  const parsed = parseSupervisorMessage(encoded.line.trimEnd());
  t.same(parsed.ok && parsed.message, launch);
  const refused = (patch: Record<string, unknown>): string =>
    reason(parseSupervisorMessage(JSON.stringify({ ...launch, ...patch })));
  t.match(refused({ v: 2 }), /launch\.v/);
  t.match(refused({ extra: 1 }), /launch\.extra: unknown field/);
  t.match(refused({ argv: [] }), /launch\.argv/);
  t.match(refused({ argv: ['a\0b'] }), /launch\.argv\[0\]: must not contain NUL/);
  t.match(refused({ cwd: 'relative' }), /launch\.cwd: must be an absolute path/);
  t.match(refused({ env: { 'A=B': 'x' } }), /launch\.env/);
  t.match(refused({ env: { A: 1 } }), /launch\.env\.A: must be a string/);
  t.match(refused({ tty: { cols: 0, rows: 10 } }), /launch\.tty\.cols/);
  t.match(refused({ tty: { cols: 80, rows: 24, x: 1 } }), /launch\.tty\.x: unknown field/);
  t.match(refused({ egress: null }), /launch\.egress: must be a boolean/);
  t.match(refused({ egress: { socketPath: '/run/p.sock' } }), /launch\.egress: must be a boolean/);
  t.equal(refused({ tty: { cols: 80, rows: 24 }, egress: true }), 'ok');
});

t.test('the seccomp message carries the supervisor-compiled program as base64', async (t) => {
  const compiled = workerSeccompMessage();
  if (!compiled.ok) throw new Error(compiled.detail);
  const encoded = encodeMessage(compiled.message);
  if (!encoded.ok) throw new Error(encoded.detail);
  t.same(parseSupervisorMessage(encoded.line.trimEnd()), { ok: true, message: compiled.message });
  t.equal(Buffer.from(compiled.message.program, 'base64').length % 8, 0, 'whole sock_filter entries');
  t.match(reason(parseSupervisorMessage('{"type":"seccomp","program":"not base64"}')), /seccomp\.program/);
  t.match(reason(parseSupervisorMessage('{"type":"seccomp","program":"AAAA","x":1}')), /seccomp\.x: unknown field/);
  t.match(reason(parseSupervisorMessage('{"type":"seccomp"}')), /seccomp\.program/);
});

t.test('control messages and unknown types', async (t) => {
  t.equal(reason(parseSupervisorMessage('{"type":"resize","cols":80,"rows":24}')), 'ok');
  t.match(reason(parseSupervisorMessage('{"type":"resize","cols":80,"rows":24,"z":1}')), /resize\.z/);
  t.equal(reason(parseSupervisorMessage('{"type":"signal","signal":"SIGTERM"}')), 'ok');
  t.match(reason(parseSupervisorMessage('{"type":"signal","signal":"SIGSYS"}')), /signal\.signal/);
  t.match(
    reason(parseSupervisorMessage('{"type":"started","pid":1}')),
    /^unknown_type/,
    'worker messages are not supervisor messages',
  );
  t.match(reason(parseSupervisorMessage('{"type":"__proto__"}')), /^unknown_type/);
  t.match(reason(parseSupervisorMessage('[]')), /^invalid_message/);
  t.match(reason(parseSupervisorMessage('{')), /^invalid_json/);
});

t.test('worker messages', async (t) => {
  const rusage = { userCpuUsec: 1, systemCpuUsec: 2, maxRssKiB: 3 };
  const exitOf = (fields: Record<string, unknown>) =>
    reason(parseWorkerMessage(JSON.stringify({ type: 'exit', rusage, ...fields })));
  t.equal(exitOf({ exitCode: 3, signal: null }), 'ok');
  t.equal(exitOf({ exitCode: null, signal: 'SIGKILL' }), 'ok');
  t.match(exitOf({ exitCode: 1, signal: 'SIGKILL' }), /exactly one/);
  t.equal(exitOf({ exitCode: 127, signal: null, spawnError: 'not_found', detail: 'x: not found' }), 'ok');
  t.equal(exitOf({ exitCode: 126, signal: null, spawnError: 'not_executable', detail: 'x' }), 'ok');
  t.match(exitOf({ exitCode: 1, signal: null, spawnError: 'not_found', detail: 'x' }), /exit\.exitCode: must be 127/);
  t.match(exitOf({ exitCode: 127, signal: null, spawnError: 'crashed', detail: 'x' }), /exit\.spawnError/);
  t.match(exitOf({ exitCode: 127, signal: null, spawnError: 'not_found' }), /exit\.detail/);
  t.match(exitOf({ exitCode: 2, signal: null, detail: 'x' }), /exit\.detail: only with spawnError/);
  t.match(exitOf({ exitCode: 1, signal: null, rusage: { ...rusage, x: 1 } }), /exit\.rusage\.x/);
  t.match(
    exitOf({ exitCode: 0, signal: null, bridgeRelay: null }),
    /exit\.bridgeRelay: unknown field/,
    'the worker has no relay to report since the bridge is gone',
  );
  t.equal(reason(parseWorkerMessage('{"type":"error","code":"unexpected_fds","detail":"x"}')), 'ok');
  t.match(reason(parseWorkerMessage('{"type":"error","code":"made_up","detail":"x"}')), /error\.code/);
  t.equal(reason(parseWorkerMessage('{"type":"started","pid":42}')), 'ok');
  t.equal(reason(parseWorkerMessage('{"type":"ready"}')), 'ok');
  t.match(reason(parseWorkerMessage('{"type":"ready","pid":1}')), /ready\.pid/);
});

t.test('line decoder: split chunks, split UTF-8, bounded lines', async (t) => {
  const d = new LineDecoder();
  const bytes = Buffer.from('{"a":"é"}\n{"b":1}\n');
  const first = d.push(bytes.subarray(0, 8)); // splits the two-byte é
  t.same(first.ok && first.lines, []);
  t.equal(d.hasPartialLine(), true);
  const rest = d.push(bytes.subarray(8));
  t.same(rest.ok && rest.lines, ['{"a":"é"}', '{"b":1}']);
  t.equal(d.hasPartialLine(), false);

  const big = new LineDecoder();
  const overflow = big.push(Buffer.alloc(MAX_LINE_BYTES, 0x61));
  t.equal(overflow.ok ? 'ok' : overflow.reason, 'line_too_long');
  const after = big.push(Buffer.from('{}\n'));
  t.equal(after.ok, false, 'a decoder that lost framing stays failed');
  const exact = new LineDecoder().push(Buffer.concat([Buffer.alloc(MAX_LINE_BYTES - 1, 0x61), Buffer.from('\n')]));
  t.equal(exact.ok, true, 'a line of exactly MAX_LINE_BYTES including the newline is accepted');
  t.equal(encodeMessage({ type: 'error', code: 'spawn_failed', detail: 'x'.repeat(MAX_LINE_BYTES) }).ok, false);
});
