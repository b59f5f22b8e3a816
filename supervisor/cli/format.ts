/** Human-readable tables for `status`, `check`, `drain` and `events`. `--json` bypasses all of this. */
// The wire types: the CLI formats what the API answered.
import type { GovernanceEvent, HostCapacity, ModeAvailability, WorkerHostStatus } from '../../api/schema/index.js';
import type { RelayReport } from '../../proxy/relay/kernel-relay.js';

function table(rows: Array<[string, string]>): string {
  const width = Math.max(...rows.map(([label]) => label.length));
  return rows.map(([label, value]) => `${label.padEnd(width)}  ${value}`).join('\n') + '\n';
}

/** Bytes as a binary-prefixed size: 2147483648 → "2 GiB", 1536 → "1.5 KiB". */
export function humanBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const text = unit === 0 || Number.isInteger(value) ? String(value) : value.toFixed(1).replace(/\.0$/, '');
  return `${text} ${units[unit]}`;
}

/**
 * A turn's egress denials as `run` reports them when the command ends, one line each: a command
 * whose fetch failed shows only its client's view (`CONNECT tunnel failed, response 403`).
 */
export function egressDenialLines(egress: {
  firstDenials: Array<{ host: string; port: number | null; reason: string }>;
  unlistedDenials: number;
}): string[] {
  const lines = egress.firstDenials.map(
    (denial) =>
      `egress denied: ${denial.host.includes(':') ? `[${denial.host}]` : denial.host}${denial.port === null ? '' : `:${denial.port}`} (${denial.reason})`,
  );
  if (egress.unlistedDenials > 0)
    lines.push(
      `egress denied ${egress.unlistedDenials} more time${egress.unlistedDenials === 1 ? '' : 's'} (turnhost events --kind egress_denial)`,
    );
  return lines;
}

/** Limits measured in bytes (the others are counts, or CPUs for cpu). */
const BYTE_LIMITS = new Set(['memory', 'data', 'file_size', 'tmp_size']);

function limitValue(limit: string, value: number): string {
  if (BYTE_LIMITS.has(limit)) return humanBytes(value);
  if (limit === 'cpu') return `${value} CPU${value === 1 ? '' : 's'}`;
  return String(value);
}

/**
 * A mode's line. The probes report `restricted` only when the configuration turns it on, so an
 * absent `restricted` is a mode the operator disabled, not one that failed to be probed.
 */
function mode(availability: ModeAvailability | undefined, name: 'ordinary' | 'restricted'): string {
  if (availability === undefined)
    return name === 'restricted' ? 'disabled (modes.restricted.enabled is false)' : 'not probed';
  const when = `(${availability.trigger}, ${availability.checkedAt})`;
  return availability.available
    ? `available ${when}`
    : `UNAVAILABLE: ${availability.requirement ?? 'no requirement named'} ${when}`;
}

function workspaceTurns(availability: ModeAvailability | undefined): string {
  if (availability === undefined) return 'not configured (workspaces.root is null)';
  const when = `(${availability.trigger}, ${availability.checkedAt})`;
  return availability.available
    ? `available ${when}`
    : `UNAVAILABLE: ${availability.requirement ?? 'no requirement named'} ${when}`;
}

function workspaceCap(cap: WorkerHostStatus['workspaceCap']): string {
  if (cap === undefined) return 'not configured (workspaces.root is null)';
  const bound = `${cap.maxBytes ?? '-'} bytes, ${cap.maxFiles ?? 'mkfs default'} files`;
  return cap.enforced
    ? `enforced: a filesystem per workspace (${bound})`
    : `NOT ENFORCED (${cap.mechanism}): ${cap.requirement ?? 'no requirement named'}`;
}

function workerHostRows(status: WorkerHostStatus | null): Array<[string, string]> {
  if (status === null) return [['worker host', 'UNKNOWN: the boot probe failed; run `turnhost check`']];
  const rows: Array<[string, string]> = [
    ['ordinary', mode(status.ordinary, 'ordinary')],
    ['restricted', mode(status.restricted, 'restricted')],
    ['workspace turns', workspaceTurns(status.workspaceTurns)],
    ['workspace cap', workspaceCap(status.workspaceCap)],
    [
      'identity',
      status.identity === undefined
        ? 'NONE: no worker identity is established (see the mode requirements)'
        : status.identity + (status.workerUid !== undefined ? ` (worker uid ${status.workerUid})` : ''),
    ],
  ];
  if (status.rootServer) rows.push(['root server', `WARNING: ${status.rootServer.warning}`]);
  for (const limit of status.limits.enforced)
    rows.push([
      `limit ${limit.limit}`,
      `enforced ${limitValue(limit.limit, limit.value)} (${limit.source}${limit.backend ? `, ${limit.backend}` : ''})`,
    ]);
  for (const limit of status.limits.absent)
    rows.push([`limit ${limit.limit}`, `absent: ${limit.reason} (${limit.source})`]);
  const b = status.boundary;
  rows.push(
    ['seccomp', `${b.seccomp.available ? 'available' : 'UNAVAILABLE'}: ${b.seccomp.detail}`],
    ['net namespaces', `${b.networkNamespaces.available ? 'available' : 'UNAVAILABLE'}: ${b.networkNamespaces.detail}`],
    ['landlock', `${b.landlock.available ? `ABI ${b.landlock.abi}` : 'UNAVAILABLE'}: ${b.landlock.detail}`],
    [
      'cgroup',
      `${b.cgroup.layout}${b.cgroup.delegated ? ', delegated' : ''}${b.cgroup.nsdelegate ? ', nsdelegate' : ''}: ${b.cgroup.detail}`,
    ],
    [
      'identity helper',
      b.identityHelper.path === null ? 'none configured' : `${b.identityHelper.path}: ${b.identityHelper.detail}`,
    ],
    ['egress', status.governed.egress.detail],
    [
      'governed',
      status.governed.available
        ? 'available'
        : `UNAVAILABLE: ${status.governed.detail ?? status.governed.reason ?? ''}`,
    ],
  );
  if (status.governed.configurationView !== undefined)
    rows.push([
      'configuration',
      status.governed.configurationView === 'live' ? 'live (reloaded since start)' : 'startup',
    ]);
  return rows;
}

export function formatWorkerHost(status: WorkerHostStatus | null): string {
  return table(workerHostRows(status));
}

/** The attack battery's cases, one row each: mode, case, result and its evidence or reason. */
export function formatAttestation(attested: WorkerHostStatus['attested']): string {
  if (attested === undefined) return 'attack battery: no run\n';
  const { held, broken, skipped } = attested.counts;
  const rows = attested.cases.map((c) => [c.mode, c.case, c.result, c.reason]);
  const widths = [0, 1, 2].map((column) => Math.max(...rows.map((row) => row[column]!.length), 4));
  const lines = rows.map((row) =>
    row.map((cell, column) => (column < 3 ? cell.padEnd(widths[column]!) : cell)).join('  '),
  );
  return (
    [...lines, `attack battery at ${attested.checkedAt}: ${held} held, ${broken} broken, ${skipped} skipped`].join(
      '\n',
    ) + '\n'
  );
}

interface StatusAnswer {
  software: { release: string; sourceCommit: string };
  host: { kernel: string; distro: string; cpus: number; memoryBytes: number };
  runtime: {
    workerHost: WorkerHostStatus | null;
    events: {
      fallbackActive: boolean;
      fallbackPendingEvents: number;
      lastFallbackReason: string | null;
      databasePath: string;
    };
    capacity?: HostCapacity;
    preparedWorkers?: { ready: number; starting: number };
    egressRelay?: RelayReport | null;
  };
  uptime: number;
}

export function formatStatus(answer: StatusAnswer): string {
  const events = answer.runtime.events;
  return table([
    ['software', `turnhost ${answer.software.release} (commit ${answer.software.sourceCommit})`],
    [
      'host',
      `${answer.host.distro}, kernel ${answer.host.kernel}, ${answer.host.cpus} CPUs, ${humanBytes(answer.host.memoryBytes)}`,
    ],
    ['uptime', `${Math.round(answer.uptime)} s`],
    [
      'events',
      events.fallbackActive
        ? `FALLBACK LOG ACTIVE: ${events.fallbackPendingEvents} events pending (${events.lastFallbackReason ?? 'unknown reason'})`
        : `database ${events.databasePath}`,
    ],
    ...workerHostRows(answer.runtime.workerHost),
    ...capacityRows(answer.runtime.capacity),
    ...preparedWorkerRows(answer.runtime.preparedWorkers),
    ...egressRelayRows(answer.runtime.egressRelay),
  ]);
}

/** A refusal is a tunnel relayed in Node instead: slower, never less checked. */
function egressRelayRows(relay: RelayReport | null | undefined): Array<[string, string]> {
  if (relay === undefined) return [];
  if (relay === null) return [['egress relay', 'not started (no turn proxy yet)']];
  const refused = relay.refused.relay_not_ready + relay.refused.not_adoptable;
  const state = relay.state === 'failed' ? `FAILED: ${relay.failure ?? 'unknown'}` : relay.state;
  const fallback =
    refused === 0
      ? ''
      : `, ${refused} relayed in Node (not ready ${relay.refused.relay_not_ready}, not adoptable ${relay.refused.not_adoptable})`;
  return [
    ['egress relay', `${state}, ${relay.adopted} spliced (tunnels and forward bodies), ${relay.open} open${fallback}`],
  ];
}

function capacityRows(capacity: HostCapacity | undefined): Array<[string, string]> {
  if (capacity === undefined) return [];
  const drain = capacity.draining ? 'DRAINING: new turns are refused (turnhost drain --off)' : 'not draining';
  return [
    [
      'capacity',
      `${capacity.turnsRunning} of ${capacity.maxTurns} turns running, ${capacity.freeSlots} free, ${capacity.workspacesHeld} workspaces held`,
    ],
    ['drain', drain],
  ];
}

/** The room left and drain mode, as `drain` and `check` print them. */
export function formatCapacity(capacity: HostCapacity): string {
  return table(capacityRows(capacity));
}

function preparedWorkerRows(prepared: { ready: number; starting: number } | undefined): Array<[string, string]> {
  return prepared ? [['prepared workers', `${prepared.ready} ready, ${prepared.starting} starting`]] : [];
}

export function formatEvent(event: GovernanceEvent): string {
  const scope = `${event.sessionId ?? '-'}/${event.turnId ?? '-'}`;
  return `${event.id}\t${event.at}\t${event.kind} v${event.schemaVersion}\t${scope}\t${event.actor}\t${JSON.stringify(event.payload)}\n`;
}
