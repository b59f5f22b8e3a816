/**
 * The attack battery as the daemon runs it: on request, at boot (`probes.attackAtBoot`) and on a
 * schedule (`probes.attackIntervalSeconds`). It keeps the last attestation and lays it over
 * every later probe answer, so a broken case keeps its mode unavailable until an attack run
 * shows it held again; each run is one `boundary_attested` event.
 */
import type { EventSink } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import {
  applyAttestation,
  attestationEvent,
  runAttackBattery,
  type AttackFailure,
  type AttackHost,
  type AttackTrigger,
} from './attack.js';
import type { BoundaryAttestation, WorkerHostStatus } from './types.js';

export interface BoundaryAttackDeps {
  config: TurnhostConfig;
  logger: Logger;
  events: EventSink;
  host: AttackHost;
  /** The supervisor's TCP ports now (they are bound after the runner is made). */
  ownPorts: () => number[];
  batteryPath?: string;
}

export class BoundaryAttack {
  private last: BoundaryAttestation | null = null;
  private running: Promise<Result<{ status: WorkerHostStatus }, AttackFailure>> | null = null;

  constructor(private readonly deps: BoundaryAttackDeps) {}

  /** `status` with the last attestation laid over it (unchanged before any run). */
  keep(status: WorkerHostStatus): WorkerHostStatus {
    return this.last === null ? status : applyAttestation(status, this.last);
  }

  /** Attacks the modes `status` offers; one run at a time (a second caller shares the first's). */
  run(status: WorkerHostStatus, trigger: AttackTrigger): Promise<Result<{ status: WorkerHostStatus }, AttackFailure>> {
    this.running ??= this.runOnce(status, trigger).finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async runOnce(
    status: WorkerHostStatus,
    trigger: AttackTrigger,
  ): Promise<Result<{ status: WorkerHostStatus }, AttackFailure>> {
    const { config, logger, host, batteryPath } = this.deps;
    let attested: Awaited<ReturnType<typeof runAttackBattery>>;
    try {
      attested = await runAttackBattery({
        config,
        logger,
        status,
        host,
        ownPorts: this.deps.ownPorts(),
        ...(batteryPath === undefined ? {} : { batteryPath }),
      });
    } catch (error) {
      attested = fail('attack_failed', (error as Error).message);
    }
    if (!attested.ok) {
      logger.error('attack battery did not run', { trigger, reason: attested.reason, detail: attested.detail });
      return attested;
    }
    const { ok: _ok, ...attestation } = attested;
    this.last = attestation;
    this.deps.events.append(attestationEvent(attestation, trigger));
    return ok({ status: applyAttestation(status, attestation) });
  }
}
