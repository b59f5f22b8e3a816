/**
 * Turn request validation: every refusal names the field. Used by the turn manager, so the HTTP
 * route, the CLI and `run --local` all share one gate. The structure (types, patterns, sizes,
 * unknown fields) is the API schema's TurnCreateRequest; what needs the configuration or the
 * file system's path rules is checked here. Every refused field is reported, the first one
 * also as `field` and `detail`.
 */
import path from 'node:path';
import type { Fail } from '../../core/result.js';
import { compileValidator, createAjv, fieldRefusal } from '../../api/schema/validate.js';
import {
  MAX_ENV_VALUE_BYTES,
  MAX_REQUEST_STDIN_BYTES,
  TurnCreateRequest,
  type FieldError,
} from '../../api/schema/index.js';
import type { TurnhostConfig } from '../config/types.js';
import { reservedEnvName } from './env-filter.js';
import { PREPARED_WORKER_PREFIX } from './prepared-workers.js';
import type { TurnRequest } from './types.js';

export type RequestFailure = Fail<'invalid_request'> & { field: string; errors: FieldError[] };

const MAX_ARG_BYTES = 128 * 1024;

const structure = compileValidator<TurnCreateRequest>(createAjv(), TurnCreateRequest);

function isBeneath(dir: string, root: string): boolean {
  const rel = path.relative(root, dir);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** A path relative to a workspace: no empty, `.` or `..` part (or exactly "."). */
function isCanonicalRelative(value: string): boolean {
  return value === '.' || value.split('/').every((part) => part !== '' && part !== '.' && part !== '..');
}

/** A plain turn's cwd: absolute, normalised, under a workspace root, clear of the workspaces root. */
function plainCwdError(cwd: unknown, config: TurnhostConfig): string | null {
  if (typeof cwd !== 'string' || !path.isAbsolute(cwd) || path.resolve(cwd) !== cwd)
    return 'expected a normalised absolute path';
  if (!config.turns.workspaceRoots.some((root) => isBeneath(cwd, root)))
    return `must lie beneath a configured workspace root (turns.workspaceRoots: ${config.turns.workspaceRoots.join(', ') || 'none configured'})`;
  const workspacesRoot = config.workspaces.root;
  if (workspacesRoot !== null && (isBeneath(cwd, workspacesRoot) || isBeneath(workspacesRoot, cwd)))
    return `must not contain or lie in the workspaces root (workspaces.root ${workspacesRoot}): run in a workspace with the workspace field`;
  return null;
}

/** What the schema cannot know: the configuration, the path rules and the decoded input size. */
function semanticErrors(body: Record<string, unknown>, config: TurnhostConfig, refused: Set<string>): FieldError[] {
  const errors: FieldError[] = [];
  const add = (field: string, detail: string): void => {
    if (!refused.has(field)) errors.push({ field, detail });
  };
  const { turnId, mode, argv, cwd, workspace, env, timeoutSeconds, stdin, stdinEncoding } = body;
  if (typeof turnId === 'string' && turnId.startsWith(PREPARED_WORKER_PREFIX))
    add('turnId', `the prefix ${PREPARED_WORKER_PREFIX} is reserved for prepared workers`);
  if (mode === 'restricted' && !config.modes.restricted.enabled)
    add('mode', 'restricted mode is not enabled in the configuration (modes.restricted.enabled)');
  if (Array.isArray(argv) && argv.every((a) => typeof a === 'string')) {
    if (argv[0] === '') add('argv[0]', 'must not be empty');
    const bytes = argv.reduce((sum: number, a: string) => sum + Buffer.byteLength(a), 0);
    if (bytes > MAX_ARG_BYTES) add('argv', `longer than ${MAX_ARG_BYTES} bytes`);
  }
  if (workspace === undefined) {
    const problem = plainCwdError(cwd, config);
    if (problem !== null) add('cwd', problem);
  } else if (typeof cwd === 'string') {
    if (path.isAbsolute(cwd))
      add('cwd', 'with workspace, cwd is a path relative to the workspace (absolute paths are refused)');
    else if (!isCanonicalRelative(cwd)) add('cwd', 'expected a normalised relative path without .. (or ".")');
  }
  if (typeof env === 'object' && env !== null && !Array.isArray(env)) {
    for (const [name, value] of Object.entries(env as Record<string, unknown>)) {
      const reserved = reservedEnvName(name);
      if (reserved !== null) add(`env.${name}`, reserved);
      else if (typeof value === 'string' && Buffer.byteLength(value) > MAX_ENV_VALUE_BYTES)
        add(`env.${name}`, `${Buffer.byteLength(value)} bytes; at most ${MAX_ENV_VALUE_BYTES}`);
    }
  }
  if (typeof timeoutSeconds === 'number' && timeoutSeconds > config.turns.maxTimeoutSeconds)
    add('timeoutSeconds', `above the configured maximum ${config.turns.maxTimeoutSeconds} (turns.maxTimeoutSeconds)`);
  if (stdinEncoding !== undefined && stdin === undefined) add('stdinEncoding', 'given without stdin');
  if (typeof stdin === 'string') {
    if (stdinEncoding === 'base64' && !/^[A-Za-z0-9+/]*={0,2}$/.test(stdin))
      add('stdin', 'expected base64 (stdinEncoding is base64)');
    const bytes = stdinEncoding === 'base64' ? Buffer.byteLength(stdin, 'base64') : Buffer.byteLength(stdin);
    if (bytes > MAX_REQUEST_STDIN_BYTES)
      add('stdin', `${bytes} bytes; at most ${MAX_REQUEST_STDIN_BYTES} (512 KiB) once decoded`);
  }
  return errors;
}

const ORDER = Object.keys(TurnCreateRequest.properties);
const topField = (field: string): number => {
  const index = ORDER.indexOf(/^[^.[]+/.exec(field)?.[0] ?? field);
  return index < 0 ? -1 : index;
};

/** The request's stdin as bytes (validated by validateTurnRequest), or null without one. */
export function requestStdin(request: TurnRequest): Buffer | null {
  if (request.stdin === undefined) return null;
  return Buffer.from(request.stdin, request.stdinEncoding === 'base64' ? 'base64' : 'utf8');
}

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
  if (errors.length > 0) {
    const refusal = fieldRefusal(errors);
    return { ok: false, reason: 'invalid_request', detail: refusal.error, field: refusal.field, errors };
  }

  const valid = body as TurnCreateRequest;
  // A workspace turn's cwd is relative to the workspace (the manager makes it absolute).
  const cwd = valid.workspace === undefined ? valid.cwd! : (valid.cwd ?? '.');
  const request: TurnRequest = { sessionId: valid.sessionId, mode: valid.mode, argv: valid.argv, cwd };
  if (valid.workspace !== undefined) request.workspace = valid.workspace;
  if (valid.turnId !== undefined) request.turnId = valid.turnId;
  if (valid.env !== undefined) request.env = valid.env;
  if (valid.tty !== undefined && valid.tty !== null) request.tty = { cols: valid.tty.cols, rows: valid.tty.rows };
  if (valid.timeoutSeconds !== undefined) request.timeoutSeconds = valid.timeoutSeconds;
  if (valid.egressAllow !== undefined) request.egressAllow = valid.egressAllow;
  if (valid.limits !== undefined) request.limits = valid.limits;
  if (valid.model !== undefined) request.model = valid.model;
  if (valid.stdin !== undefined) request.stdin = valid.stdin;
  if (valid.stdinEncoding !== undefined) request.stdinEncoding = valid.stdinEncoding;
  return { ok: true, request };
}
