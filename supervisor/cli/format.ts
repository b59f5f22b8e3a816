/** Human-readable tables for `status`, `check` and `events`. `--json` bypasses all of this. */
import type { GovernanceEvent } from '../events/types.js';
import type { ModeAvailability, WorkerHostStatus } from '../probes/types.js';
import type { RelayReport } from '../../proxy/relay/kernel-relay.js';

function table(rows: Array<[string, string]>): string {
  const width = Math.max(...rows.map(([label]) => label.length));
  return rows.map(([label, value]) => `${label.padEnd(width)}  ${value}`).join('\n') + '\n';
}

function mode(availability: ModeAvailability | undefined): string {
  if (availability === undefined) return 'not probed';
  const when = `(${availability.trigger}, ${availability.checkedAt})`;
  return availability.available
    ? `available ${when}`
    : `UNAVAILABLE: ${availability.requirement ?? 'no requirement named'} ${when}`;
}

export function workerHostRows(status: WorkerHostStatus | null): Array<[string, string]> {
  if (status === null) return [['worker host', 'UNKNOWN: the boot probe failed; run `turnhost check`']];
  const rows: Array<[string, string]> = [
    ['ordinary', mode(status.ordinary)],
    ['restricted', mode(status.restricted)],
    ['identity', status.identity + (status.workerUid !== undefined ? ` (worker uid ${status.workerUid})` : '')],
  ];
  if (status.rootServer) rows.push(['root server', `WARNING: ${status.rootServer.warning}`]);
  for (const limit of status.limits.enforced)
    rows.push([
      `limit ${limit.limit}`,
      `enforced ${limit.value} (${limit.source}${limit.backend ? `, ${limit.backend}` : ''})`,
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
  return rows;
}

export function formatWorkerHost(status: WorkerHostStatus | null): string {
  return table(workerHostRows(status));
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
      `${answer.host.distro}, kernel ${answer.host.kernel}, ${answer.host.cpus} CPUs, ${(answer.host.memoryBytes / 2 ** 30).toFixed(1)} GiB`,
    ],
    ['uptime', `${Math.round(answer.uptime)} s`],
    [
      'events',
      events.fallbackActive
        ? `FALLBACK LOG ACTIVE: ${events.fallbackPendingEvents} events pending (${events.lastFallbackReason ?? 'unknown reason'})`
        : `database ${events.databasePath}`,
    ],
    ...workerHostRows(answer.runtime.workerHost),
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

function preparedWorkerRows(prepared: { ready: number; starting: number } | undefined): Array<[string, string]> {
  return prepared ? [['prepared workers', `${prepared.ready} ready, ${prepared.starting} starting`]] : [];
}

export function formatEvent(event: GovernanceEvent): string {
  const scope = `${event.sessionId ?? '-'}/${event.turnId ?? '-'}`;
  return `${event.id}\t${event.at}\t${event.kind} v${event.schemaVersion}\t${scope}\t${event.actor}\t${JSON.stringify(event.payload)}\n`;
}
