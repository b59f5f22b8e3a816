/**
 * The turn manager: the only way to start a worker. One launch sequence (launch.ts) runs in a
 * fixed order; this module keeps the running turns, their output, cancel/timeout, and the
 * durable records.
 */
import { randomBytes } from 'node:crypto';
import type Database from 'better-sqlite3';
import { fail, ok } from '../../core/result.js';
import type { Logger } from '../../core/log.js';
import { kernelRelayReport } from '../../relay/kernel-relay.js';
import type { TurnhostConfig } from '../config/types.js';
import type { EventSink } from '../events/types.js';
import type { ProbeContext } from '../probes/index.js';
import { createTurnRecordStore, type TurnRecordStore } from './store.js';
import { createOutputChannel } from './output.js';
import { validateTurnRequest } from './validate.js';
import {
  launchTurn,
  prepareLaunchEnvironment,
  recoverInterruptedTurns,
  type LaunchEnvironment,
  type RunningTurn,
} from './launch.js';
import type { TurnManager, TurnRecord, TurnResult, TurnAttachment } from './types.js';

export interface TurnManagerDeps {
  config: TurnhostConfig;
  logger: Logger;
  events: EventSink;
  db: Database.Database;
  probeContext: ProbeContext;
  /** The worker program: `node` and the compiled worker entry (used directly in shared_uid mode). */
  worker: { node: string; entry: string };
  env?: NodeJS.ProcessEnv;
  /** Where the per-turn runtime directory (proxy sockets) is created; default the OS temp dir. */
  runtimeParent?: string;
  /** Name of the turn-cgroup subtree under the supervisor's own cgroup(s); tests use unique names. */
  cgroupSubtreeName?: string;
  /**
   * Default: euid is 0. Chooses only the turn temp's ownership path (launch.ts); a test sets
   * false to run the non-root path (helper chown at launch, helper reclaim before the purge).
   */
  supervisorIsRoot?: boolean;
}

const RECENT_TURNS_KEPT = 64;

function newTurnId(): string {
  return `turn_${randomBytes(9).toString('base64url')}`;
}

export async function createTurnManager(deps: TurnManagerDeps): Promise<TurnManager> {
  const records: TurnRecordStore = createTurnRecordStore(deps.db);
  const running = new Map<string, RunningTurn>();
  /** Recently finished turns keep their output backlog, so a client that attaches late still gets it. */
  const recent = new Map<string, RunningTurn>();
  const retire = (id: string, turn: RunningTurn): void => {
    running.delete(id);
    recent.set(id, turn);
    for (const oldest of recent.keys()) {
      if (recent.size <= RECENT_TURNS_KEPT) break;
      recent.delete(oldest);
    }
  };
  const launchEnv: LaunchEnvironment = await prepareLaunchEnvironment(deps, records);
  await recoverInterruptedTurns(launchEnv);

  const manager: TurnManager = {
    async create(body) {
      const validated = validateTurnRequest(body, deps.config);
      if (!validated.ok) return validated;
      const request = validated.request;
      const id = request.turnId ?? newTurnId();
      if (running.has(id) || records.exists(id))
        return { ...fail('conflict', `turn ${id} already exists`), field: 'turnId' };
      if (running.size >= deps.config.turns.maxConcurrent)
        return fail('capacity_exhausted', `${running.size} turns are running; the limit is ${deps.config.turns.maxConcurrent} (turns.maxConcurrent)`);

      const output = createOutputChannel();
      const launched = await launchTurn(launchEnv, { ...request, turnId: id }, output);
      if (!launched.ok) return launched;
      const turn = launched.turn;
      running.set(id, turn);
      void turn.done.then(() => retire(id, turn));
      return ok({ turn: turn.record });
    },

    get: (id) => running.get(id)?.record ?? records.get(id),

    list: (filter) => {
      const stored = records.list({ sessionId: filter?.sessionId });
      return stored.map((r) => running.get(r.id)?.record ?? r);
    },

    cancel(id) {
      const turn = running.get(id);
      if (!turn) return records.exists(id) ? fail('not_running', `turn ${id} has already finished`) : fail('not_found', `no turn ${id}`);
      turn.stop('cancelled');
      return ok({ turn: turn.record });
    },

    attach(id) {
      const turn = running.get(id) ?? recent.get(id);
      const record = turn?.record ?? records.get(id);
      if (!record) return fail('not_found', `no turn ${id}`);
      const attachment: TurnAttachment = turn
        ? turn.attach()
        : finishedAttachment(record);
      return ok({ attachment });
    },

    // issue 6: held roots for host writes (supervisor/http/host-write-route.ts)
    roots(id) {
      const turn = running.get(id);
      const target = turn?.hostWriteTarget();
      if (target) return ok(target);
      if (turn || records.exists(id)) return fail('turn_finished', `turn ${id} has finished; host writes are closed`);
      return fail('not_found', `no turn ${id}`);
    },

    async wait(id) {
      const turn = running.get(id);
      if (turn) return turn.done;
      return records.get(id)?.result ?? undefined;
    },

    preparedWorkers: () => launchEnv.preparedWorkers.counts(),

    egressRelay: () => kernelRelayReport(),

    async close() {
      const pending = [...running.values()];
      for (const turn of pending) turn.stop('cancelled');
      await Promise.all(pending.map((t) => t.done));
      await launchEnv.close();
    },
  };
  return manager;
}

/** Attaching to a finished turn replays only its exit record. */
function finishedAttachment(record: TurnRecord): TurnAttachment {
  const result = record.result as TurnResult;
  return {
    onEvent: (listener) => listener({ type: 'exit', result }),
    write: () => undefined,
    resize: () => undefined,
    signal: () => undefined,
    detach: () => undefined,
  };
}
