/**
 * Placement facts for a host application running turns over many hosts: `GET /api/ready` (no
 * token) answers whether a new turn may start here and how much room is left, and
 * `POST /api/drain` turns drain mode on or off. Ready means: the latest probe found mode
 * `ordinary` available (and workspace turns, when configured), the host is not draining, and a
 * turn slot is free; otherwise 503 with a code a client can tell apart (`not_ready`, `draining`,
 * `host_full`) and the requirement not met. docs/hosting.md "Placing turns" is the client's side.
 */
import express, { type Router } from 'express';
import type { DrainRequest, HostCapacity } from '../../api/schema/placement.js';
import { DrainRequest as DrainRequestSchema } from '../../api/schema/placement.js';
import { compileValidator, createAjv, fieldRefusal } from '../../api/schema/validate.js';
import type { WorkerHostStatus } from '../probes/types.js';
import type { TurnManager } from '../turns/types.js';
import { MAX_BODY_BYTES, sendError } from './errors.js';
import { route } from './routing.js';

export interface PlacementDeps {
  latestStatus: () => WorkerHostStatus | null;
  /** Absent when the daemon serves no turns: ready then reports no capacity. */
  turns?: Pick<TurnManager, 'load' | 'setDraining'>;
  /** How many workspaces this host holds (all states): a session on one must stay here. */
  workspacesHeld: () => number;
}

type Readiness =
  { ok: true; checkedAt: string } | { ok: false; code: 'not_ready' | 'draining' | 'host_full'; requirement: string };

/** The room for new turns now; freeSlots is 0 while draining. */
export function hostCapacity(turns: Pick<TurnManager, 'load'>, workspacesHeld: number): HostCapacity {
  const load = turns.load();
  const free = Math.max(0, load.maxTurns - load.turnsRunning);
  return {
    turnsRunning: load.turnsRunning,
    maxTurns: load.maxTurns,
    freeSlots: load.draining ? 0 : free,
    workspacesHeld,
    draining: load.draining,
  };
}

/** The probe's verdict on mode `ordinary` (and on workspace turns, when configured). */
function probeReadiness(status: WorkerHostStatus | null): Readiness {
  const unready = (requirement: string): Readiness => ({ ok: false, code: 'not_ready', requirement });
  if (status === null) return unready('no worker host probe has completed yet');
  const ordinary = status.ordinary;
  if (ordinary === undefined) return unready('mode ordinary was not probed');
  if (!ordinary.available) return unready(ordinary.requirement ?? 'mode ordinary is unavailable');
  const workspaces = status.workspaceTurns;
  if (workspaces?.available === false) return unready(workspaces.requirement ?? 'workspace turns are unavailable');
  return { ok: true, checkedAt: ordinary.checkedAt };
}

/** Probe first (a broken host is broken whether or not it drains), then drain, then room. */
function readiness(status: WorkerHostStatus | null, capacity: HostCapacity | null): Readiness {
  const probed = probeReadiness(status);
  if (!probed.ok || capacity === null) return probed;
  if (capacity.draining)
    return { ok: false, code: 'draining', requirement: 'the host is not draining (turnhost drain --off)' };
  if (capacity.freeSlots === 0)
    return {
      ok: false,
      code: 'host_full',
      requirement: `a free turn slot: ${capacity.turnsRunning} of ${capacity.maxTurns} are running (turns.maxConcurrent)`,
    };
  return probed;
}

/** `GET /api/ready`: public, so a load balancer's health check needs no token. */
export function registerReadyRoute(router: Router, deps: PlacementDeps): void {
  route(router, '/api/ready', {
    get: (_req, res) => {
      const capacity = deps.turns === undefined ? null : hostCapacity(deps.turns, deps.workspacesHeld());
      const ready = readiness(deps.latestStatus(), capacity);
      if (ready.ok)
        return void res.json({ status: 'ready', checkedAt: ready.checkedAt, ...(capacity ? { capacity } : {}) });
      // 503, so a load balancer that reads only the status takes the host out of rotation.
      sendError(res, 503, ready.code, `not ready: ${ready.requirement}`, { requirement: ready.requirement });
    },
  });
}

const validateDrain = compileValidator<DrainRequest>(createAjv(), DrainRequestSchema);

/** `POST /api/drain` `{ "draining": bool }`: token-protected like every change. */
export function registerDrainRoute(
  router: Router,
  deps: { turns: Pick<TurnManager, 'load' | 'setDraining'>; workspacesHeld: () => number },
): void {
  const json = express.json({ limit: MAX_BODY_BYTES, strict: true });
  route(router, '/api/drain', {
    post: [
      json,
      (req, res) => {
        if (!req.is('application/json'))
          return sendError(res, 400, 'invalid_request', 'body: expected an application/json object', {
            field: 'body',
          });
        const checked = validateDrain((req.body as unknown) ?? null);
        if (!checked.ok) {
          const { error, ...named } = fieldRefusal(checked.errors);
          return sendError(res, 400, 'invalid_request', error, named);
        }
        const changed = deps.turns.setDraining(checked.value.draining, 'api');
        res.json({
          draining: checked.value.draining,
          changed,
          capacity: hostCapacity(deps.turns, deps.workspacesHeld()),
        });
      },
    ],
  });
}
