/**
 * POST /api/status/worker-host: re-runs the probes; with `{ "attack": true }` also the attack
 * battery (docs/probes.md, "Attack battery"). No body is the plain check, as before the body
 * existed; a body must be the JSON object the schema names, every refusal naming its field.
 */
import express, { type RequestHandler } from 'express';
import { compileValidator, createAjv, fieldRefusal } from '../../api/schema/validate.js';
import { WorkerHostCheckRequest } from '../../api/schema/worker-host.js';
import type { Result } from '../../core/result.js';
import type { WorkerHostStatus } from '../probes/types.js';
import { MAX_BODY_BYTES, sendError } from './errors.js';

const validateCheck = compileValidator<WorkerHostCheckRequest>(createAjv(), WorkerHostCheckRequest);

export interface WorkerHostCheckDeps {
  /** Re-runs the probes (trigger "check") and records the answer as the latest status. */
  probes: () => Promise<WorkerHostStatus>;
  /** Re-runs the probes and then the attack battery; absent when no turn manager runs turns. */
  attack?: () => Promise<Result<{ status: WorkerHostStatus }>>;
}

function hasBody(headers: Record<string, unknown>): boolean {
  const length = headers['content-length'];
  return (length !== undefined && length !== '0') || headers['transfer-encoding'] !== undefined;
}

function check(deps: WorkerHostCheckDeps): RequestHandler {
  return async (req, res) => {
    if (!hasBody(req.headers)) return res.json(await deps.probes());
    if (req.is('application/json') === false)
      return sendError(res, 400, 'invalid_request', 'body: expected an application/json object', { field: 'body' });
    const checked = validateCheck((req.body as unknown) ?? {});
    if (!checked.ok) {
      const { error, ...named } = fieldRefusal(checked.errors);
      return sendError(res, 400, 'invalid_request', error, named);
    }
    if (checked.value.attack !== true) return res.json(await deps.probes());
    if (deps.attack === undefined)
      return sendError(
        res,
        503,
        'worker_host_unsupported',
        'attack: the attack battery needs the turn manager, which is not running',
      );
    const attacked = await deps.attack();
    if (!attacked.ok)
      return sendError(res, 503, 'worker_host_unsupported', `attack: the battery did not run: ${attacked.detail}`);
    res.json(attacked.status);
  };
}

/** The route's handlers: the JSON parser (only for a body) and the check. */
export function workerHostCheck(deps: WorkerHostCheckDeps): RequestHandler[] {
  return [express.json({ limit: MAX_BODY_BYTES, strict: true }), check(deps)];
}
