/**
 * Turn request validation: every refusal names the field. Used by the turn manager, so the HTTP
 * route, the CLI and `run --local` all share one gate. The structure (types, patterns, sizes,
 * unknown fields) is the API schema's TurnCreateRequest; what needs the configuration or the
 * file system's path rules is checked here. Every refused field is reported, the first one
 * also as `field` and `detail`.
 */
import path from 'node:path';
import type { Fail } from '../../core/result.js';
import { compileValidator, createAjv } from '../../api/schema/validate.js';
import { TurnCreateRequest, type FieldError } from '../../api/schema/index.js';
import type { TurnhostConfig } from '../config/types.js';
import { PREPARED_WORKER_PREFIX } from './prepared-workers.js';
import type { TurnRequest } from './types.js';

export type RequestFailure = Fail<'invalid_request'> & { field: string; errors: FieldError[] };

export const TURN_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_ARG_BYTES = 128 * 1024;

const structure = compileValidator<TurnCreateRequest>(createAjv(), TurnCreateRequest);

function isBeneath(dir: string, root: string): boolean {
  const rel = path.relative(root, dir);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** What the schema cannot know: the configuration and the path rules. */
function semanticErrors(body: Record<string, unknown>, config: TurnhostConfig, refused: Set<string>): FieldError[] {
  const errors: FieldError[] = [];
  const add = (field: string, detail: string): void => {
    if (!refused.has(field)) errors.push({ field, detail });
  };
  const { turnId, mode, argv, cwd, timeoutSeconds } = body;
  if (typeof turnId === 'string' && turnId.startsWith(PREPARED_WORKER_PREFIX))
    add('turnId', `the prefix ${PREPARED_WORKER_PREFIX} is reserved for prepared workers`);
  if (mode === 'restricted' && !config.modes.restricted.enabled)
    add('mode', 'restricted mode is not enabled in the configuration (modes.restricted.enabled)');
  if (Array.isArray(argv) && argv.every((a) => typeof a === 'string')) {
    if (argv[0] === '') add('argv[0]', 'must not be empty');
    const bytes = argv.reduce((sum: number, a: string) => sum + Buffer.byteLength(a), 0);
    if (bytes > MAX_ARG_BYTES) add('argv', `longer than ${MAX_ARG_BYTES} bytes`);
  }
  if (typeof cwd === 'string' && !refused.has('cwd')) {
    if (path.resolve(cwd) !== cwd) add('cwd', 'expected a normalised absolute path');
    else if (!config.turns.workspaceRoots.some((root) => isBeneath(cwd, root)))
      add(
        'cwd',
        `must lie beneath a configured workspace root (turns.workspaceRoots: ${config.turns.workspaceRoots.join(', ') || 'none configured'})`,
      );
  }
  if (typeof timeoutSeconds === 'number' && timeoutSeconds > config.turns.maxTimeoutSeconds)
    add('timeoutSeconds', `above the configured maximum ${config.turns.maxTimeoutSeconds} (turns.maxTimeoutSeconds)`);
  return errors;
}

const ORDER = Object.keys(TurnCreateRequest.properties);
const topField = (field: string): number => {
  const index = ORDER.indexOf(/^[^.[]+/.exec(field)?.[0] ?? field);
  return index < 0 ? -1 : index;
};

export function validateTurnRequest(
  body: unknown,
  config: TurnhostConfig,
): { ok: true; request: TurnRequest } | RequestFailure {
  const checked = structure(body);
  const errors = checked.ok ? [] : checked.errors;
  if (typeof body === 'object' && body !== null && !Array.isArray(body)) {
    const refused = new Set(errors.map((e) => e.field));
    const more = semanticErrors(body as Record<string, unknown>, config, refused);
    if (more.length > 0) {
      errors.push(...more);
      // Unknown fields stay first; the rest in the schema's order.
      errors.sort((a, b) => topField(a.field) - topField(b.field));
    }
  }
  const first = errors[0];
  if (first !== undefined)
    return {
      ok: false,
      reason: 'invalid_request',
      detail: `${first.field}: ${first.detail}`,
      field: first.field,
      errors,
    };

  const valid = body as TurnCreateRequest;
  const request: TurnRequest = { sessionId: valid.sessionId, mode: valid.mode, argv: valid.argv, cwd: valid.cwd };
  if (valid.turnId !== undefined) request.turnId = valid.turnId;
  if (valid.env !== undefined) request.env = valid.env;
  if (valid.tty !== undefined && valid.tty !== null) request.tty = { cols: valid.tty.cols, rows: valid.tty.rows };
  if (valid.timeoutSeconds !== undefined) request.timeoutSeconds = valid.timeoutSeconds;
  if (valid.egressAllow !== undefined) request.egressAllow = valid.egressAllow;
  if (valid.limits !== undefined) request.limits = valid.limits;
  if (valid.model !== undefined) request.model = valid.model;
  return { ok: true, request };
}
