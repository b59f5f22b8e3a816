/**
 * What a turn's egress came to, for its result: counts of connections, bytes and denials, and
 * the first denials by name, so a user whose fetch failed learns which host was refused and why
 * without reading the event log. The events stay the full record; this is a bounded digest.
 */
import type { DenialReason } from './events.js';

/** Denials the summary names; the rest are only counted. */
export const LISTED_DENIALS = 10;

export interface EgressDenialEntry {
  host: string;
  port: number | null;
  reason: DenialReason;
}

export interface EgressSummary {
  /** Forward requests and CONNECT tunnels served (each also an `egress_connection` event). */
  connections: number;
  bytesUp: number;
  bytesDown: number;
  /** Refused requests (each also an `egress_denial` event). */
  denials: number;
  /** The first denials, in the order they happened; at most LISTED_DENIALS. */
  firstDenials: EgressDenialEntry[];
  /** Denials beyond firstDenials: counted, not named. */
  unlistedDenials: number;
}

export class EgressTally {
  private connections = 0;
  private bytesUp = 0;
  private bytesDown = 0;
  private readonly denials: EgressDenialEntry[] = [];
  private unlisted = 0;

  connection(counts: { bytesUp: number; bytesDown: number }): void {
    this.connections += 1;
    this.bytesUp += counts.bytesUp;
    this.bytesDown += counts.bytesDown;
  }

  denial(entry: EgressDenialEntry): void {
    if (this.denials.length < LISTED_DENIALS)
      this.denials.push({ host: entry.host, port: entry.port, reason: entry.reason });
    else this.unlisted += 1;
  }

  summary(): EgressSummary {
    return {
      connections: this.connections,
      bytesUp: this.bytesUp,
      bytesDown: this.bytesDown,
      denials: this.denials.length + this.unlisted,
      firstDenials: this.denials.map((entry) => ({ ...entry })),
      unlistedDenials: this.unlisted,
    };
  }
}
