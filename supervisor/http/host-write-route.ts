/**
 * Host writes into a running turn's tree:
 *   PUT /api/turns/:id/files?path=REL&mode=create|replace[&root=workspace|temp][&sha256=HEX]
 * The raw body (any content type, no content encoding) is the file, at most `maxBytes`
 * (config.fs.hostWriteMaxBytes); this route enforces that cap itself and is registered before
 * the app's 1 MiB body cap. The write goes through the fs guard (supervisor/fs/host-write.ts).
 *
 * Status: 201 created / 200 replaced, `{ bytes, sha256, replaced }`; 400 `invalid_path`
 * (field `path`) or `invalid_request` naming the parameter; 404 unknown turn (or `root=temp`
 * on a turn without one); 409 `turn_finished`, `exists`, `stale_base`, `topology_changed`,
 * `alias_denied`, `not_a_directory`; 413 `body_too_large`; 415 a content encoding; 500 I/O error.
 */
import type { Request, Response, Router } from 'express';
import { isValidId } from '../../api/schema/ids.js';
import type { Logger } from '../../core/log.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { EventSink } from '../../core/events.js';
import { validateRelativePath, type FsRefusal } from '../fs/guard.js';
import { hostWrite, recordHostWriteRefusal, type HostWriteTarget, type HostWriteTurn } from '../fs/host-write.js';
import type { TurnManager } from '../turns/types.js';
import { sendError, type ErrorCode } from './errors.js';
import { QueryCheck, requestQuery, sendQueryRefusal, type QueryFailure } from './query-params.js';
import { route } from './routing.js';
import { requestLogger } from './request-id.js';

export interface HostWriteRouteDeps {
  turns: Pick<TurnManager, 'roots'>;
  events: EventSink;
  /** The body cap in bytes (config.fs.hostWriteMaxBytes). */
  maxBytes: number;
  logger: Logger;
}

interface HostWriteParams {
  rel: string;
  mode: 'create' | 'replace';
  target: HostWriteTarget;
  expectedSha256?: string;
}

const PARAMETERS = ['path', 'mode', 'root', 'sha256'];
const SHA256_HEX = /^[0-9a-f]{64}$/;

/** Refusal → status and code. `invalid_path` / `invalid_option` never reach here from the guard unchecked. */
const REFUSAL_STATUS: Record<FsRefusal, { status: number; code: ErrorCode }> = {
  invalid_path: { status: 400, code: 'invalid_path' },
  invalid_option: { status: 400, code: 'invalid_request' },
  too_large: { status: 413, code: 'body_too_large' },
  not_found: { status: 404, code: 'not_found' },
  exists: { status: 409, code: 'exists' },
  stale_base: { status: 409, code: 'stale_base' },
  topology_changed: { status: 409, code: 'topology_changed' },
  alias_denied: { status: 409, code: 'alias_denied' },
  not_a_directory: { status: 409, code: 'not_a_directory' },
  io_error: { status: 500, code: 'internal_error' },
};

/** The parameters' form is refused as every route's is; the path's safety after it, as `invalid_path`. */
type ParamFailure = QueryFailure | { ok: false; reason: 'invalid_path'; detail: string; field: 'path' };

function parseParams(query: URLSearchParams): { ok: true; params: HostWriteParams } | ParamFailure {
  const check = new QueryCheck(query, PARAMETERS);
  const rel = check.get('path');
  if (rel === null) check.refuse('path', 'required (a path relative to the root)');
  const mode = check.get('mode');
  if (mode !== 'create' && mode !== 'replace') check.refuse('mode', "expected 'create' or 'replace'");
  const target = check.get('root') ?? 'workspace';
  if (target !== 'workspace' && target !== 'temp') check.refuse('root', "expected 'workspace' or 'temp'");
  const sha256 = check.get('sha256');
  if (sha256 !== null) {
    if (mode === 'create') check.refuse('sha256', 'only allowed with mode=replace');
    else if (!SHA256_HEX.test(sha256)) check.refuse('sha256', 'expected 64 lowercase hex digits');
  }
  const refused = check.failure();
  if (refused !== null) return refused;
  // Every parameter was accepted, so path and mode hold values of their form.
  const params: HostWriteParams = {
    rel: rel!,
    mode: mode as HostWriteParams['mode'],
    target: target as HostWriteTarget,
  };
  const path = validateRelativePath(params.rel);
  if (!path.ok) return { ok: false, reason: 'invalid_path', detail: `path: ${path.detail}`, field: 'path' };
  if (sha256 !== null) params.expectedSha256 = sha256;
  return { ok: true, params };
}

/** Reads the raw body, stopping at the first byte above `maxBytes`. */
function readBody(req: Request, maxBytes: number): Promise<Result<{ data: Buffer }, 'too_large' | 'aborted'>> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let total = 0;
    let settled = false;
    const settle = (result: Result<{ data: Buffer }, 'too_large' | 'aborted'>): void => {
      if (settled) return;
      settled = true;
      resolve(result);
    };
    req.on('data', (chunk: Buffer) => {
      if (settled) return;
      total += chunk.length;
      if (total > maxBytes) {
        req.pause();
        settle(fail('too_large', `body: larger than ${maxBytes} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => settle(ok({ data: Buffer.concat(chunks, total) })));
    req.on('error', () => settle(fail('aborted', 'body: the request was aborted')));
    req.on('close', () => settle(fail('aborted', 'body: the request was aborted')));
  });
}

/** Where a created file is written again: the same route, path and root. */
function fileLocation(id: string, params: HostWriteParams): string {
  const query = new URLSearchParams({ path: params.rel, mode: 'replace', root: params.target });
  return `/api/turns/${encodeURIComponent(id)}/files?${query.toString()}`;
}

function sendTooLarge(res: Response, maxBytes: number): void {
  res.setHeader('Connection', 'close');
  sendError(res, 413, 'body_too_large', `body: larger than ${maxBytes} bytes (fs.hostWriteMaxBytes)`, {
    field: 'body',
  });
}

export function registerHostWriteRoute(router: Router, deps: HostWriteRouteDeps): void {
  const lookup = (res: Response, id: string): HostWriteTurn | null => {
    const found = deps.turns.roots(id);
    if (found.ok) return found.turn;
    if (found.reason === 'not_found') sendError(res, 404, 'not_found', found.detail);
    else sendError(res, 409, 'turn_finished', found.detail);
    return null;
  };

  route(router, '/api/turns/:id/files', {
    put: async (req, res) => {
      const id = String(req.params['id']);
      if (!isValidId(id)) return sendError(res, 404, 'not_found', 'no turn (malformed id)');
      const turn = lookup(res, id);
      if (!turn) return;
      const query = requestQuery(req);
      const parsed = parseParams(query);
      if (!parsed.ok) {
        if (parsed.reason === 'invalid_request') return sendQueryRefusal(res, parsed);
        recordHostWriteRefusal(deps.events, turn, query.get('path') ?? '', 'invalid_path');
        return sendError(res, 400, 'invalid_path', parsed.detail, { field: 'path' });
      }
      const { params } = parsed;
      if (Number(req.headers['content-length'] ?? 0) > deps.maxBytes) {
        recordHostWriteRefusal(deps.events, turn, params.rel, 'too_large');
        return sendTooLarge(res, deps.maxBytes);
      }
      const body = await readBody(req, deps.maxBytes);
      if (!body.ok) {
        if (body.reason === 'aborted') return void res.destroy();
        recordHostWriteRefusal(deps.events, turn, params.rel, 'too_large');
        return sendTooLarge(res, deps.maxBytes);
      }
      // The roots are taken again after the body arrived: the turn may have ended meanwhile.
      const current = deps.turns.roots(id);
      if (!current.ok) return void lookup(res, id);
      const written = hostWrite({
        roots: current.roots,
        target: params.target,
        rel: params.rel,
        mode: params.mode,
        ...(params.expectedSha256 === undefined ? {} : { expectedSha256: params.expectedSha256 }),
        data: body.data,
        maxBytes: deps.maxBytes,
        sink: deps.events,
        turn: current.turn,
      });
      if (written.ok) {
        const { bytes, sha256, replaced } = written;
        if (!replaced) res.setHeader('Location', fileLocation(id, params));
        return void res.status(replaced ? 200 : 201).json({ bytes, sha256, replaced });
      }
      const { status, code } = REFUSAL_STATUS[written.reason];
      if (written.reason === 'io_error') {
        requestLogger(res, deps.logger).error('host write failed', { turnId: id, detail: written.detail });
        return sendError(res, status, code, 'internal error; the supervisor log has the details');
      }
      const field = written.reason === 'invalid_path' ? { field: 'path' } : {};
      sendError(res, status, code, written.detail, field);
    },
  });
}
