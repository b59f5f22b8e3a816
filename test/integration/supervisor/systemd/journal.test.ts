/**
 * Governance events to the journal's native protocol, received on a stand-in socket: the
 * fields, the binary form for values with a newline, and a missing socket never failing the
 * supervisor. The VM tier reads the same entries back from the real journald.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createMemoryLogger } from '../../../../core/log.js';
import type { GovernanceEvent } from '../../../../supervisor/events/types.js';
import {
  createJournalEventSink,
  encodeJournalEntry,
  journalFieldName,
} from '../../../../supervisor/systemd/journal.js';
import { bindDatagramReceiver } from '../../../support/datagram-receiver.js';

/** Reads the native protocol: `NAME=value\n`, or `NAME\n` + le64 length + value + `\n`. */
function parseEntry(data: Buffer): Map<string, string> {
  const fields = new Map<string, string>();
  let at = 0;
  while (at < data.length) {
    const newline = data.indexOf(0x0a, at);
    const line = data.subarray(at, newline).toString('utf8');
    const equals = line.indexOf('=');
    if (equals >= 0) {
      fields.set(line.slice(0, equals), line.slice(equals + 1));
      at = newline + 1;
      continue;
    }
    const length = Number(data.readBigUInt64LE(newline + 1));
    fields.set(line, data.subarray(newline + 9, newline + 9 + length).toString('utf8'));
    if (data[newline + 9 + length] !== 0x0a) throw new Error(`${line}: no newline after the value`);
    at = newline + 10 + length;
  }
  return fields;
}

const denial: GovernanceEvent = {
  id: 42,
  sessionId: 's1',
  turnId: 't1',
  at: '2026-12-03T10:00:00.000Z',
  kind: 'egress_denial',
  schemaVersion: 1,
  actor: 'server',
  model: null,
  profile: 'governed',
  payload: { host: 'blocked.example', port: 443, reason: 'not_allowlisted' },
};

t.test('an event becomes one structured entry', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-journal-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const socket = path.join(dir, 'journal.sock');
  const journald = bindDatagramReceiver(socket);
  t.teardown(() => journald.close());
  const sink = createJournalEventSink({ socketPath: socket, logger: createMemoryLogger().logger });
  t.teardown(() => sink.close());
  sink.send(denial);
  const entry = parseEntry(await journald.next('the entry'));
  t.equal(entry.get('MESSAGE'), 'turnhost egress_denial turn t1: host=blocked.example port=443 reason=not_allowlisted');
  t.equal(entry.get('PRIORITY'), '4', 'a denial is a warning');
  t.equal(entry.get('SYSLOG_IDENTIFIER'), 'turnhost');
  t.equal(entry.get('TURNHOST_KIND'), 'egress_denial');
  t.equal(entry.get('TURNHOST_EVENT_ID'), '42');
  t.equal(entry.get('TURNHOST_SESSION'), 's1');
  t.equal(entry.get('TURNHOST_TURN'), 't1');
  t.equal(entry.get('TURNHOST_PROFILE'), 'governed');
  t.notOk(entry.has('TURNHOST_MODEL'), 'a null model has no field');
  t.same(JSON.parse(entry.get('TURNHOST_PAYLOAD') ?? ''), denial.payload);
  t.equal(entry.get('TURNHOST_PAYLOAD_HOST'), 'blocked.example');
  t.equal(entry.get('TURNHOST_PAYLOAD_REASON'), 'not_allowlisted');
  t.same(sink.counts(), { sent: 1, failed: 0 });

  const launch: GovernanceEvent = {
    ...denial,
    id: 43,
    kind: 'worker_launch',
    payload: { mode: 'ordinary', command: 'sh', limits: { pids: 64 }, launchMs: 12 },
  };
  sink.send(launch);
  const second = parseEntry(await journald.next('the launch entry'));
  t.equal(second.get('PRIORITY'), '6');
  t.equal(second.get('TURNHOST_PAYLOAD_LAUNCH_MS'), '12');
  t.notOk(second.has('TURNHOST_PAYLOAD_LIMITS'), 'objects stay in TURNHOST_PAYLOAD only');
});

t.test('a value with a newline uses the length-prefixed form', async (t) => {
  const encoded = encodeJournalEntry([
    ['A', 'one'],
    ['B', 'two\nlines'],
  ]);
  const expected = Buffer.concat([
    Buffer.from('A=one\nB\n'),
    Buffer.from([9, 0, 0, 0, 0, 0, 0, 0]),
    Buffer.from('two\nlines\n'),
  ]);
  t.same([...encoded], [...expected]);
  t.same(
    [...parseEntry(encoded)],
    [
      ['A', 'one'],
      ['B', 'two\nlines'],
    ],
  );
  t.equal(journalFieldName('bytesUp'), 'BYTES_UP');
  t.equal(journalFieldName('workerUid'), 'WORKER_UID');
});

t.test('no journal socket: counted and logged once, never thrown', async (t) => {
  const { logger, lines } = createMemoryLogger();
  const sink = createJournalEventSink({ socketPath: '/nonexistent/journal.sock', logger });
  sink.send(denial);
  sink.send(denial);
  sink.close();
  t.same(sink.counts(), { sent: 0, failed: 2 });
  t.equal(lines.filter((line) => line.includes('could not be sent to the journal')).length, 1);
});
