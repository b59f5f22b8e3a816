/**
 * Payloads of the proxy's governance events. Only the fields named here leave the proxy:
 * host, port, method, path without query, byte counts, duration, outcome, scope. Header values,
 * query strings and bodies have no field to go into.
 */
import { serverTurnEvent, type TurnAttribution } from '../core/events.js';
import type { EventInput } from '../core/events.js';
import type { Scope } from './policy.js';

export type TurnIdentity = TurnAttribution;

export type DenialReason =
  | 'not_allowlisted'
  | 'denied_by_rule'
  | 'denied_address_class'
  | 'invalid_host'
  | 'invalid_port'
  | 'invalid_request'
  | 'host_mismatch'
  | 'unsupported_scheme'
  | 'unsupported_upgrade'
  | 'cap_exceeded'
  | 'resolve_failed'
  | 'peer_refused'
  | 'self_connection'
  | 'turn_ended'
  /** A brokered request (brokers.ts) refused: its method, its route, its size. */
  | 'relay_method_refused'
  | 'relay_route_refused'
  | 'relay_request_too_large';

export type ConnectionOutcome =
  | 'ok'
  | 'connect_failed'
  | 'upstream_error'
  | 'client_error'
  | 'idle_timeout'
  | 'cap_exceeded'
  | 'turn_ended'
  /** The kernel relay thread died under the tunnel (docs/egress.md). */
  | 'relay_failed'
  /** The upstream of a broker answered a redirect, which is never followed (the turn got 502). */
  | 'redirect_refused';

export interface ConnectionRecord {
  host: string;
  port: number;
  /** null for CONNECT: the tunnel is opaque. */
  method: string | null;
  /** Without query or fragment; null for CONNECT. */
  path: string | null;
  bytesUp: number;
  bytesDown: number;
  durationMs: number;
  outcome: ConnectionOutcome;
  scope: Scope;
  /** The provider or brokered credential that relayed it (brokers.ts); null through the general proxy. */
  broker?: string | null;
  /** The upstream's HTTP status as the relay saw it; null when it saw none (the general proxy does not parse answers). */
  status?: number | null;
}

const MAX_RECORDED_HOST = 255;
const MAX_RECORDED_PATH = 2048;

function printable(raw: string, maxLength: number): string {
  let out = '';
  for (const ch of raw.slice(0, maxLength)) {
    const code = ch.charCodeAt(0);
    out += code < 0x20 || code > 0x7e ? `\\x${code.toString(16).padStart(2, '0')}` : ch;
  }
  return out;
}

/** A refused raw host made safe to store: non-printable bytes escaped, length bounded. */
function printableHost(raw: string): string {
  return printable(raw, MAX_RECORDED_HOST);
}

/**
 * What a refused request named as its host, safe to store: cut before any path, query or
 * fragment, without userinfo (which can carry a password), escaped and bounded.
 */
export function recordedAuthority(raw: string): string {
  const end = raw.search(/[/?#]/);
  const authority = end < 0 ? raw : raw.slice(0, end);
  return printableHost(authority.slice(authority.lastIndexOf('@') + 1));
}

/** The path as the event shows it: everything before `?` or `#`, bounded. */
export function visiblePath(requestTarget: string): string {
  const end = requestTarget.search(/[?#]/);
  const path = end < 0 ? requestTarget : requestTarget.slice(0, end);
  return printable(path, MAX_RECORDED_PATH) || '/';
}

export function connectionEvent(turn: TurnIdentity, record: ConnectionRecord): EventInput {
  return serverTurnEvent(turn, 'egress_connection', {
    host: record.host,
    port: record.port,
    method: record.method,
    path: record.path,
    bytesUp: record.bytesUp,
    bytesDown: record.bytesDown,
    durationMs: record.durationMs,
    outcome: record.outcome,
    scope: record.scope,
    inference: record.scope === 'inference',
    broker: record.broker ?? null,
    status: record.status ?? null,
  });
}

export function denialEvent(
  turn: TurnIdentity,
  denial: { host: string; port: number | null; reason: DenialReason },
): EventInput {
  return serverTurnEvent(turn, 'egress_denial', { host: denial.host, port: denial.port, reason: denial.reason });
}
