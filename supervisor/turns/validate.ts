/**
 * Turn request validation: every refusal names the field. Used by the turn manager, so the HTTP
 * route, the CLI and `run --local` all share one gate.
 */
import path from 'node:path';
import type { Fail } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import { PREPARED_WORKER_PREFIX } from './prepared-workers.js';
import type { TurnRequest } from './types.js';

export type RequestFailure = Fail<'invalid_request'> & { field: string };

export const TURN_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
export const SESSION_ID_PATTERN = /^[A-Za-z0-9_.:-]{1,128}$/;
const LIMIT_NAMES = new Set(['memory', 'pids', 'cpu', 'processes', 'open_files', 'file_size', 'data']);
const MAX_ARGV = 4096;
const MAX_ARG_BYTES = 128 * 1024;
const MAX_ENV = 256;

function refuse(field: string, detail: string): RequestFailure {
  return { ok: false, reason: 'invalid_request', detail: `${field}: ${detail}`, field };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function hasControl(value: string): boolean {
  return value.includes('\0');
}

function isBeneath(dir: string, root: string): boolean {
  const rel = path.relative(root, dir);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

const KNOWN_FIELDS = new Set([
  'sessionId',
  'turnId',
  'mode',
  'argv',
  'cwd',
  'env',
  'tty',
  'timeoutSeconds',
  'egressAllow',
  'limits',
  'model',
  'stdin',
  'stdinEncoding',
  'workspace',
]);

/** The most input a request may carry (decoded); larger input goes through attach. */
export const MAX_REQUEST_STDIN_BYTES = 512 * 1024;

/** The request's stdin as bytes (validated by validateTurnRequest), or null without one. */
export function requestStdin(request: TurnRequest): Buffer | null {
  if (request.stdin === undefined) return null;
  return Buffer.from(request.stdin, request.stdinEncoding === 'base64' ? 'base64' : 'utf8');
}

export function validateTurnRequest(
  body: unknown,
  config: TurnhostConfig,
): { ok: true; request: TurnRequest } | RequestFailure {
  if (!isRecord(body)) return refuse('body', 'expected a JSON object');
  for (const key of Object.keys(body)) if (!KNOWN_FIELDS.has(key)) return refuse(key, 'unknown field');

  const { sessionId, turnId, mode, argv, cwd, workspace } = body;
  if (typeof sessionId !== 'string' || !SESSION_ID_PATTERN.test(sessionId))
    return refuse('sessionId', 'expected 1-128 characters of [A-Za-z0-9_.:-]');
  if (turnId !== undefined && (typeof turnId !== 'string' || !TURN_ID_PATTERN.test(turnId)))
    return refuse('turnId', 'expected 1-64 characters of [A-Za-z0-9_-]');
  if (typeof turnId === 'string' && turnId.startsWith(PREPARED_WORKER_PREFIX))
    return refuse('turnId', `the prefix ${PREPARED_WORKER_PREFIX} is reserved for prepared workers`);
  if (mode !== 'ordinary' && mode !== 'restricted') return refuse('mode', "expected 'ordinary' or 'restricted'");
  if (mode === 'restricted' && !config.modes.restricted.enabled)
    return refuse('mode', 'restricted mode is not enabled in the configuration (modes.restricted.enabled)');

  if (!Array.isArray(argv) || argv.length === 0 || argv.length > MAX_ARGV)
    return refuse('argv', `expected a non-empty array of at most ${MAX_ARGV} strings`);
  let argBytes = 0;
  for (const [i, arg] of argv.entries()) {
    if (typeof arg !== 'string' || hasControl(arg)) return refuse(`argv[${i}]`, 'expected a string without NUL');
    argBytes += Buffer.byteLength(arg);
  }
  if (argv[0] === '') return refuse('argv[0]', 'must not be empty');
  if (argBytes > MAX_ARG_BYTES) return refuse('argv', `longer than ${MAX_ARG_BYTES} bytes`);

  if (workspace !== undefined) {
    if (typeof workspace !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(workspace))
      return refuse('workspace', 'expected a workspace id (1-64 characters of [A-Za-z0-9_-])');
    if (cwd !== undefined && (typeof cwd !== 'string' || path.isAbsolute(cwd)))
      return refuse('cwd', 'with workspace, cwd is a path relative to the workspace (absolute paths are refused)');
    const relative = cwd === undefined ? '.' : cwd;
    if (relative !== '.' && !isCanonicalRelative(relative))
      return refuse('cwd', 'expected a normalised relative path without .. (or ".")');
    const request: TurnRequest = { sessionId, mode, argv: argv as string[], cwd: relative, workspace };
    return finishRequest(request, body, config);
  }
  if (typeof cwd !== 'string' || !path.isAbsolute(cwd) || hasControl(cwd) || path.resolve(cwd) !== cwd)
    return refuse('cwd', 'expected a normalised absolute path');
  if (!config.turns.workspaceRoots.some((root) => isBeneath(cwd, root)))
    return refuse(
      'cwd',
      `must lie beneath a configured workspace root (turns.workspaceRoots: ${config.turns.workspaceRoots.join(', ') || 'none configured'})`,
    );
  const workspacesRoot = config.workspaces.root;
  if (workspacesRoot !== null && (isBeneath(cwd, workspacesRoot) || isBeneath(workspacesRoot, cwd)))
    return refuse(
      'cwd',
      `must not contain or lie in the workspaces root (workspaces.root ${workspacesRoot}): run in a workspace with the workspace field`,
    );

  return finishRequest({ sessionId, mode, argv: argv as string[], cwd }, body, config);
}

function isCanonicalRelative(value: string): boolean {
  if (hasControl(value) || value.length > 4096) return false;
  return value.split('/').every((part) => part !== '' && part !== '.' && part !== '..');
}

/** The fields every request shares, whatever its cwd. */
function finishRequest(
  request: TurnRequest,
  body: Record<string, unknown>,
  config: TurnhostConfig,
): { ok: true; request: TurnRequest } | RequestFailure {
  const { turnId, env, tty, timeoutSeconds, egressAllow, limits, model } = body;
  if (typeof turnId === 'string') request.turnId = turnId;

  if (env !== undefined) {
    if (!isRecord(env)) return refuse('env', 'expected an object of strings');
    const entries = Object.entries(env);
    if (entries.length > MAX_ENV) return refuse('env', `at most ${MAX_ENV} variables`);
    for (const [name, value] of entries)
      if (typeof value !== 'string') return refuse(`env.${name}`, 'expected a string');
    request.env = env as Record<string, string>;
  }

  if (tty !== undefined && tty !== null) {
    if (!isRecord(tty)) return refuse('tty', 'expected { cols, rows }');
    for (const dim of ['cols', 'rows'] as const) {
      const v = tty[dim];
      if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 1000)
        return refuse(`tty.${dim}`, 'expected an integer 1-1000');
    }
    request.tty = { cols: tty.cols as number, rows: tty.rows as number };
  }

  if (timeoutSeconds !== undefined) {
    if (typeof timeoutSeconds !== 'number' || !Number.isFinite(timeoutSeconds) || timeoutSeconds <= 0)
      return refuse('timeoutSeconds', 'expected a positive number');
    if (timeoutSeconds > config.turns.maxTimeoutSeconds)
      return refuse(
        'timeoutSeconds',
        `above the configured maximum ${config.turns.maxTimeoutSeconds} (turns.maxTimeoutSeconds)`,
      );
    request.timeoutSeconds = timeoutSeconds;
  }

  if (egressAllow !== undefined) {
    if (!Array.isArray(egressAllow) || egressAllow.some((h) => typeof h !== 'string'))
      return refuse('egressAllow', 'expected an array of host patterns');
    request.egressAllow = egressAllow as string[];
  }

  if (limits !== undefined) {
    if (!isRecord(limits)) return refuse('limits', 'expected an object');
    for (const [name, value] of Object.entries(limits)) {
      if (!LIMIT_NAMES.has(name)) return refuse(`limits.${name}`, 'unknown limit');
      if (typeof value !== 'string' && typeof value !== 'number')
        return refuse(`limits.${name}`, 'expected a number or a string with a unit');
    }
    request.limits = limits;
  }

  if (model !== undefined) {
    if (typeof model !== 'string' || model.length > 200 || hasControl(model))
      return refuse('model', 'expected a string of at most 200 characters');
    request.model = model;
  }

  const { stdin, stdinEncoding } = body;
  if (stdinEncoding !== undefined && stdinEncoding !== 'utf8' && stdinEncoding !== 'base64')
    return refuse('stdinEncoding', "expected 'utf8' or 'base64'");
  if (stdinEncoding !== undefined && stdin === undefined) return refuse('stdinEncoding', 'given without stdin');
  if (stdin !== undefined) {
    if (typeof stdin !== 'string') return refuse('stdin', 'expected a string');
    if (stdinEncoding === 'base64' && !/^[A-Za-z0-9+/]*={0,2}$/.test(stdin))
      return refuse('stdin', 'expected base64 (stdinEncoding is base64)');
    const bytes = stdinEncoding === 'base64' ? Buffer.byteLength(stdin, 'base64') : Buffer.byteLength(stdin);
    if (bytes > MAX_REQUEST_STDIN_BYTES)
      return refuse('stdin', `${bytes} bytes; at most ${MAX_REQUEST_STDIN_BYTES} (512 KiB) once decoded`);
    request.stdin = stdin;
    if (stdinEncoding !== undefined) request.stdinEncoding = stdinEncoding;
  }
  return { ok: true, request };
}
