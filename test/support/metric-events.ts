/**
 * Governance events as the metrics read them, for the tests that feed an event store and read
 * the exposition (the metrics themselves, the Grafana dashboard against the exported names):
 * one builder each, so a payload field added to an event kind is added once.
 */
import type { EventInput } from '../../core/events.js';

export const metricEvent = (kind: string, turnId: string | null, payload: Record<string, unknown>): EventInput => ({
  sessionId: 's',
  turnId,
  kind,
  actor: 'server',
  model: null,
  profile: 'governed',
  payload,
});

const USAGE = { userCpuUsec: 1, systemCpuUsec: 1, maxRssKiB: 1, cgroupCpuUsec: 1, memoryPeakBytes: 1, pidsPeak: 1 };

export const launchEvent = (turnId: string, launchMs: number): EventInput =>
  metricEvent('worker_launch', turnId, {
    mode: 'ordinary',
    profile: 'governed',
    identity: 'shared_uid',
    workerUid: 0,
    command: 'sh',
    cgroup: null,
    limits: {},
    launchMs,
  });

export const exitEvent = (turnId: string, status: string, limitHits: string[], oomKills: number): EventInput =>
  metricEvent('worker_exit', turnId, {
    status,
    exitCode: null,
    signal: null,
    durationMs: 5,
    usage: { ...USAGE, oomKills },
    limitHits,
  });

/** A general-proxy connection (no broker) that ended ok. */
export const egressConnectionEvent = (turnId: string, bytesUp: number, bytesDown: number): EventInput =>
  metricEvent('egress_connection', turnId, {
    host: 'a.example',
    port: 443,
    method: null,
    path: null,
    bytesUp,
    bytesDown,
    durationMs: 3,
    outcome: 'ok',
    scope: 'tool',
    inference: false,
    broker: null,
    status: null,
  });
