/**
 * Governance events as structured journal entries (`events.journal`), through journald's
 * native protocol written small: one datagram per entry to /run/systemd/journal/socket, each
 * field `NAME=value\n`, or `NAME\n` + 64-bit little-endian length + value + `\n` when the value
 * holds a newline. Log shippers (Vector's journald source, Fluent Bit's systemd input,
 * journald forwarding) then carry the events with no code of ours; docs/events.md shows how.
 *
 * Fields: MESSAGE (one readable line), PRIORITY, SYSLOG_IDENTIFIER=turnhost, the envelope as
 * TURNHOST_EVENT_ID, TURNHOST_KIND, TURNHOST_SCHEMA_VERSION, TURNHOST_SESSION, TURNHOST_TURN,
 * TURNHOST_AT, TURNHOST_ACTOR, TURNHOST_PROFILE, TURNHOST_MODEL (absent when null), the whole
 * payload as JSON in TURNHOST_PAYLOAD, and each scalar top-level payload field as
 * TURNHOST_PAYLOAD_<NAME> (camelCase → UPPER_SNAKE: bytesUp → TURNHOST_PAYLOAD_BYTES_UP).
 *
 * The journal is a copy: the database stays the record. A datagram the journal does not take
 * (socket missing, receiver full) is counted and logged once per failure streak, never retried.
 */
import type { Logger } from '../../core/log.js';
import {
  closeDatagramSocket,
  openDatagramSocket,
  sendDatagram,
  unixAddress,
  type SocketAddress,
} from '../../core/unix-datagram.js';
import type { GovernanceEvent } from '../events/types.js';

const JOURNAL_SOCKET = '/run/systemd/journal/socket';

/** Kinds that record a refusal or a limit: filed as warnings (PRIORITY=4), the rest as notices (5) or info (6). */
const WARNING_KINDS = new Set(['egress_denial', 'worker_host_refusal', 'host_write_refused', 'scratch_overage']);
const NOTICE_KINDS = new Set(['worker_recovered']);

function journalPriority(event: GovernanceEvent): number {
  if (WARNING_KINDS.has(event.kind)) return 4;
  if (NOTICE_KINDS.has(event.kind)) return 5;
  if (
    event.kind === 'worker_exit' &&
    Array.isArray(event.payload['limitHits']) &&
    event.payload['limitHits'].length > 0
  )
    return 5;
  return 6;
}

/** camelCase → UPPER_SNAKE, keeping only what a journal field name may hold (A-Z, 0-9, _). */
export function journalFieldName(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .toUpperCase()
    .replace(/[^A-Z0-9_]/g, '_');
}

function eventMessage(event: GovernanceEvent): string {
  const p = event.payload;
  const scope =
    event.turnId !== null ? ` turn ${event.turnId}` : event.sessionId !== null ? ` session ${event.sessionId}` : '';
  const parts = ['host', 'port', 'reason', 'status', 'mode', 'requirement', 'outcome', 'path']
    .filter((key) => p[key] !== undefined && p[key] !== null && typeof p[key] !== 'object')
    .map((key) => `${key}=${String(p[key])}`);
  return `turnhost ${event.kind}${scope}${parts.length > 0 ? `: ${parts.join(' ')}` : ''}`;
}

/** The fields of one event's entry, in order. */
function journalFields(event: GovernanceEvent, options: { omitPayload?: boolean } = {}): Array<[string, string]> {
  const fields: Array<[string, string]> = [
    ['MESSAGE', eventMessage(event)],
    ['PRIORITY', String(journalPriority(event))],
    ['SYSLOG_IDENTIFIER', 'turnhost'],
    ['TURNHOST_EVENT_ID', String(event.id)],
    ['TURNHOST_KIND', event.kind],
    ['TURNHOST_SCHEMA_VERSION', String(event.schemaVersion)],
    ['TURNHOST_AT', event.at],
    ['TURNHOST_ACTOR', event.actor],
  ];
  if (event.sessionId !== null) fields.push(['TURNHOST_SESSION', event.sessionId]);
  if (event.turnId !== null) fields.push(['TURNHOST_TURN', event.turnId]);
  if (event.profile !== null) fields.push(['TURNHOST_PROFILE', event.profile]);
  if (event.model !== null) fields.push(['TURNHOST_MODEL', event.model]);
  if (options.omitPayload) {
    fields.push(['TURNHOST_PAYLOAD_OMITTED', 'larger than one journal datagram; the database has it']);
    return fields;
  }
  fields.push(['TURNHOST_PAYLOAD', JSON.stringify(event.payload)]);
  for (const [key, value] of Object.entries(event.payload)) {
    if (typeof value !== 'string' && typeof value !== 'number' && typeof value !== 'boolean') continue;
    const name = `TURNHOST_PAYLOAD_${journalFieldName(key)}`;
    if (name.length <= 64) fields.push([name, String(value)]);
  }
  return fields;
}

/** The native protocol's serialisation of one entry. */
export function encodeJournalEntry(fields: Array<[string, string]>): Buffer {
  const chunks: Buffer[] = [];
  for (const [name, value] of fields) {
    const data = Buffer.from(value, 'utf8');
    if (!data.includes(0x0a)) {
      chunks.push(Buffer.from(`${name}=`, 'utf8'), data, Buffer.from('\n'));
      continue;
    }
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(BigInt(data.length));
    chunks.push(Buffer.from(`${name}\n`, 'utf8'), length, data, Buffer.from('\n'));
  }
  return Buffer.concat(chunks);
}

interface JournalEventSinkOptions {
  /** The journal's native socket; tests point it at a socket of their own. */
  socketPath?: string;
  logger: Logger;
}

export class JournalEventSink {
  private readonly logger: Logger;
  private readonly socketPath: string;
  /** Null when the socket address is unusable or no socket could be opened: every send then counts as failed. */
  private readonly fd: number | null;
  private readonly address: SocketAddress | null;
  private sent = 0;
  private failed = 0;
  /** True from a failed send until one goes through again: the streak is logged once. */
  private failing = false;
  private closed = false;

  constructor(options: JournalEventSinkOptions) {
    this.logger = options.logger;
    this.socketPath = options.socketPath ?? JOURNAL_SOCKET;
    const parsed = unixAddress(this.socketPath);
    const opened = parsed.ok ? openDatagramSocket() : null;
    this.address = parsed.ok ? parsed.address : null;
    this.fd = opened?.ok ? opened.fd : null;
    if (this.fd === null)
      this.logger.warn('events.journal is on but no journal socket can be opened; events stay in the database only', {
        detail: !parsed.ok ? parsed.detail : opened && !opened.ok ? opened.detail : 'unknown',
      });
  }

  send(event: GovernanceEvent): void {
    if (this.fd === null || this.address === null || this.closed) {
      this.failed += 1;
      return;
    }
    let result = sendDatagram(this.fd, this.address, encodeJournalEntry(journalFields(event)));
    if (!result.ok && result.reason === 'too_large')
      result = sendDatagram(this.fd, this.address, encodeJournalEntry(journalFields(event, { omitPayload: true })));
    if (result.ok) {
      this.sent += 1;
      if (this.failing) this.logger.info('governance events reach the journal again', { socket: this.socketPath });
      this.failing = false;
      return;
    }
    this.failed += 1;
    if (!this.failing)
      this.logger.warn('a governance event could not be sent to the journal (the database keeps it)', {
        socket: this.socketPath,
        kind: event.kind,
        detail: result.detail,
      });
    this.failing = true;
  }

  counts(): { sent: number; failed: number } {
    return { sent: this.sent, failed: this.failed };
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.fd !== null) closeDatagramSocket(this.fd);
  }
}

export function createJournalEventSink(options: JournalEventSinkOptions): JournalEventSink {
  return new JournalEventSink(options);
}
