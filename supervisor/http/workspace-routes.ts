/**
 * Workspace routes (docs/http-api.md, "Workspaces"; decisions in docs/workspaces.md):
 *   POST   /api/workspaces                   { sessionId?, id? } → 201, Location
 *   GET    /api/workspaces[?session=ID]       list
 *   GET    /api/workspaces/:id                one, with its usage
 *   DELETE /api/workspaces/:id[?cancel=1]     409 workspace_busy while a turn runs, unless cancel
 *   PUT    /api/workspaces/:id/files?path=REL[&mode=create|replace]   host write (raw body)
 *   GET    /api/workspaces/:id/files[?path=REL]                       a file's bytes, or a directory's listing
 *   POST   /api/workspaces/:id/files?path=REL&type=directory          mkdir -p, owned by the workspace uid
 *   DELETE /api/workspaces/:id/files?path=REL[&recursive=1]           a file, link, empty dir, or a tree
 *   PUT    /api/workspaces/:id/archive?path=DIR                       a tar stream extracted into DIR
 *   GET    /api/workspaces/:id/archive[?path=DIR]                     DIR's subtree as a tar stream
 * Registered ahead of the app's 1 MiB body cap: the file routes enforce fs.hostWriteMaxBytes
 * themselves, the JSON route its own 1 MiB parser limit. Each handler parses the request, calls
 * the workspace service (supervisor/workspaces/) and answers its result.
 */
import { once } from 'node:events';
import express, { type Request, type RequestHandler, type Response, type Router } from 'express';
import { isValidSessionId, SESSION_ID_DETAIL } from '../../api/schema/ids.js';
import { compileValidator, createAjv, fieldRefusal } from '../../api/schema/validate.js';
import { WorkspaceCreateRequest } from '../../api/schema/workspaces.js';
import type { Logger } from '../../core/log.js';
import type { TurnhostConfig } from '../config/types.js';
import type { WorkspaceService } from '../workspaces/service.js';
import type { WorkspaceFileFailure, WorkspaceView } from '../workspaces/types.js';
import { MAX_BODY_BYTES, sendError, type ErrorCode } from './errors.js';
import { QueryCheck, requestQuery, sendQueryRefusal } from './query-params.js';
import { requestLogger } from './request-id.js';
import { refuseBody, route } from './routing.js';

export interface WorkspaceRouteDeps {
  workspaces: WorkspaceService;
  config: () => TurnhostConfig;
  logger: Logger;
}

const validateCreate = compileValidator<WorkspaceCreateRequest>(createAjv(), WorkspaceCreateRequest);

const FAILURE_STATUS: Record<WorkspaceFileFailure | 'invalid_archive', number> = {
  invalid_request: 400,
  invalid_archive: 400,
  workspace_not_found: 404,
  workspace_exists: 409,
  workspace_busy: 409,
  workspace_full: 409,
  workspace_owned_elsewhere: 409,
  workspaces_unconfigured: 503,
  workspaces_unavailable: 503,
  // The fs guard's refusals of a host read or write.
  invalid_path: 400,
  invalid_option: 400,
  too_large: 413,
  not_found: 404,
  exists: 409,
  stale_base: 409,
  topology_changed: 409,
  alias_denied: 409,
  not_a_directory: 409,
  not_empty: 409,
  io_error: 500,
};

function errorCode(reason: WorkspaceFileFailure | 'invalid_archive'): ErrorCode {
  switch (reason) {
    case 'too_large':
      return 'body_too_large';
    case 'invalid_option':
      return 'invalid_request';
    case 'io_error':
      return 'internal_error';
    default:
      return reason;
  }
}

function sendFailure(
  res: Response,
  failure: { reason: WorkspaceFileFailure | 'invalid_archive'; detail: string; field?: string },
): void {
  const extra =
    failure.field !== undefined
      ? { field: failure.field }
      : failure.reason === 'invalid_request' || failure.reason === 'invalid_archive'
        ? { field: failure.detail.split(':')[0] }
        : {};
  sendError(res, FAILURE_STATUS[failure.reason], errorCode(failure.reason), failure.detail, extra);
}

function publicView(workspace: WorkspaceView, usage?: { bytes: number; files: number } | null) {
  return {
    id: workspace.id,
    sessionId: workspace.sessionId,
    uid: workspace.uid,
    identity: workspace.identity,
    turnsRunning: workspace.turnsRunning,
    createdAt: workspace.createdAt,
    lastUsedAt: workspace.lastUsedAt,
    ...(usage === undefined ? {} : { bytes: usage?.bytes ?? null, files: usage?.files ?? null }),
  };
}

function queryCheck(req: Request, known: readonly string[]): QueryCheck {
  return new QueryCheck(requestQuery(req), known);
}

/** Answers the query's refusal, if any; true when one was sent. */
function refuseQuery(res: Response, check: QueryCheck): boolean {
  const refused = check.failure();
  if (refused === null) return false;
  sendQueryRefusal(res, refused);
  return true;
}

/** Reads the raw body, refusing the first byte above `maxBytes`. */
function readBody(req: Request, maxBytes: number): Promise<Buffer | 'too_large' | 'aborted'> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let total = 0;
    let settled = false;
    const settle = (value: Buffer | 'too_large' | 'aborted') => {
      if (!settled) {
        settled = true;
        resolve(value);
      }
    };
    req.on('data', (chunk: Buffer) => {
      if (settled) return;
      total += chunk.length;
      if (total > maxBytes) {
        req.pause();
        settle('too_large');
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => settle(Buffer.concat(chunks, total)));
    req.on('error', () => settle('aborted'));
    req.on('close', () => settle('aborted'));
  });
}

/** The body of a host write, at most `maxBytes`; null once the request has been answered (413) or dropped. */
async function hostWriteBody(req: Request, res: Response, maxBytes: number): Promise<Buffer | null> {
  const tooLarge = (): null => {
    res.setHeader('Connection', 'close');
    sendError(res, 413, 'body_too_large', `body: larger than ${maxBytes} bytes (fs.hostWriteMaxBytes)`);
    return null;
  };
  if (Number(req.headers['content-length'] ?? 0) > maxBytes) return tooLarge();
  const body = await readBody(req, maxBytes);
  if (body === 'too_large') return tooLarge();
  if (body === 'aborted') {
    res.destroy();
    return null;
  }
  return body;
}

/** POST /api/workspaces: no body asks for a generated id and no session; a body must be JSON. */
function createWorkspace(deps: WorkspaceRouteDeps): RequestHandler {
  return async (req, res) => {
    if (req.is('application/json') === false)
      return sendError(res, 400, 'invalid_request', 'body: expected an application/json object', { field: 'body' });
    const checked = validateCreate((req.body as unknown) ?? {});
    if (!checked.ok) {
      const { error, ...named } = fieldRefusal(checked.errors);
      return sendError(res, 400, 'invalid_request', error, named);
    }
    const { sessionId, id } = checked.value;
    const created = await deps.workspaces.create({
      ...(typeof id === 'string' ? { id } : {}),
      ...(typeof sessionId === 'string' ? { sessionId } : {}),
    });
    if (!created.ok) return sendFailure(res, created);
    res.setHeader('Location', `/api/workspaces/${created.workspace.id}`);
    res.status(201).json({ workspace: publicView(created.workspace) });
  };
}

/** GET /api/workspaces[?session=ID]: the ready workspaces, of one session if asked. */
function listWorkspaces(deps: WorkspaceRouteDeps): RequestHandler {
  return (req, res) => {
    const check = queryCheck(req, ['session']);
    const session = check.get('session');
    if (session !== null && !isValidSessionId(session)) check.refuse('session', SESSION_ID_DETAIL);
    if (refuseQuery(res, check)) return;
    const listed = deps.workspaces
      .list(session === null ? {} : { sessionId: session })
      .filter((w) => w.state === 'ready');
    res.json({ workspaces: listed.map((w) => publicView(w)) });
  };
}

/** GET /api/workspaces/:id: one workspace with its usage (null when it cannot be measured now). */
function showWorkspace(deps: WorkspaceRouteDeps): RequestHandler {
  return async (req, res) => {
    if (refuseQuery(res, queryCheck(req, []))) return;
    const found = deps.workspaces.find(String(req.params['id']));
    if (!found.ok) return sendFailure(res, found);
    const usage = await deps.workspaces.usage(found.workspace.id);
    res.json({ workspace: publicView(found.workspace, usage.ok ? usage : null) });
  };
}

/** DELETE /api/workspaces/:id[?cancel=1]: a half-deleted workspace may be deleted again (a retry). */
function deleteWorkspace(deps: WorkspaceRouteDeps): RequestHandler {
  return async (req, res) => {
    const check = queryCheck(req, ['cancel']);
    const cancel = check.get('cancel');
    if (cancel !== null && cancel !== '1' && cancel !== '0') check.refuse('cancel', "expected '1' or '0'");
    if (refuseQuery(res, check)) return;
    const found = deps.workspaces.find(String(req.params['id']), { orDeleting: true });
    if (!found.ok) return sendFailure(res, found);
    const { id } = found.workspace;
    const removed = await deps.workspaces.delete(id, { cancel: cancel === '1' });
    if (!removed.ok) return sendFailure(res, removed);
    res.json({ deleted: id, bytesRemoved: removed.bytes, filesRemoved: removed.files });
  };
}

/** GET /api/workspaces/:id/files[?path=REL]: a file's bytes and their sha256, or a directory's entries. */
function readWorkspaceFile(deps: WorkspaceRouteDeps): RequestHandler {
  return (req, res) => {
    const check = queryCheck(req, ['path']);
    const rel = check.get('path') ?? '';
    if (refuseQuery(res, check)) return;
    const target = deps.workspaces.fileTarget(String(req.params['id']), rel, { top: true });
    if (!target.ok) return sendFailure(res, target);
    const read = deps.workspaces.readEntry(target.workspace, rel);
    if (!read.ok) return sendFailure(res, read);
    if (read.kind === 'directory') return void res.status(200).json({ entries: read.entries });
    res.setHeader('Content-Type', 'application/octet-stream');
    res.setHeader('X-Content-Sha256', read.sha256);
    res.status(200).send(read.data);
  };
}

/** The `path` every changing file route needs, checked with the route's other parameters. */
function requiredPath(check: QueryCheck): string | null {
  const rel = check.get('path');
  if (rel === null) check.refuse('path', 'required');
  return rel;
}

/** POST /api/workspaces/:id/files?path=REL&type=directory: 201 made (its address), 200 it existed. */
function makeWorkspaceDirectory(deps: WorkspaceRouteDeps): RequestHandler {
  return async (req, res) => {
    const check = queryCheck(req, ['path', 'type']);
    const rel = requiredPath(check);
    const type = check.get('type');
    if (type !== 'directory') check.refuse('type', type === null ? "required: 'directory'" : "expected 'directory'");
    if (refuseQuery(res, check) || rel === null) return;
    const target = deps.workspaces.fileTarget(String(req.params['id']), rel);
    if (!target.ok) return sendFailure(res, target);
    const made = await deps.workspaces.makeDirectory(target.workspace, rel);
    if (!made.ok) return sendFailure(res, made);
    if (made.made > 0) res.setHeader('Location', fileAddress(target.workspace.id, rel));
    res.status(made.made > 0 ? 201 : 200).json({ path: rel, made: made.made });
  };
}

/** DELETE /api/workspaces/:id/files?path=REL[&recursive=1]: a non-empty directory needs recursive. */
function deleteWorkspaceFile(deps: WorkspaceRouteDeps): RequestHandler {
  return (req, res) => {
    const check = queryCheck(req, ['path', 'recursive']);
    const rel = requiredPath(check);
    const recursive = check.get('recursive');
    if (recursive !== null && recursive !== '1' && recursive !== '0') check.refuse('recursive', "expected '1' or '0'");
    if (refuseQuery(res, check) || rel === null) return;
    const target = deps.workspaces.fileTarget(String(req.params['id']), rel);
    if (!target.ok) return sendFailure(res, target);
    const removed = deps.workspaces.removeEntry(target.workspace, rel, recursive === '1');
    if (!removed.ok) return sendFailure(res, removed);
    const { files, bytes, directories } = removed;
    res.status(200).json({ path: rel, files, bytes, directories });
  };
}

function fileAddress(workspaceId: string, rel: string): string {
  return `/api/workspaces/${encodeURIComponent(workspaceId)}/files?${new URLSearchParams({ path: rel }).toString()}`;
}

/** PUT /api/workspaces/:id/files?path=REL[&mode=create|replace]: 201 with the file's address, or 200 replaced. */
function writeWorkspaceFile(deps: WorkspaceRouteDeps): RequestHandler {
  return async (req, res) => {
    const check = queryCheck(req, ['path', 'mode']);
    const rel = check.get('path');
    if (rel === null) check.refuse('path', 'required');
    const mode = check.get('mode') ?? 'replace';
    if (mode !== 'create' && mode !== 'replace') check.refuse('mode', "expected 'create' or 'replace'");
    if (refuseQuery(res, check) || rel === null || (mode !== 'create' && mode !== 'replace')) return;
    const target = deps.workspaces.fileTarget(String(req.params['id']), rel);
    if (!target.ok) return sendFailure(res, target);
    const body = await hostWriteBody(req, res, deps.config().fs.hostWriteMaxBytes);
    if (body === null) return;
    const { workspace } = target;
    const written = await deps.workspaces.writeFile(workspace, rel, body, mode);
    if (!written.ok) {
      if (written.reason === 'io_error')
        requestLogger(res, deps.logger).error('workspace write failed', { detail: written.detail });
      return sendFailure(res, written);
    }
    // The file's own address: GET reads it, PUT (replace by default) writes it again.
    if (!written.replaced) res.setHeader('Location', fileAddress(workspace.id, rel));
    res.status(written.replaced ? 200 : 201).json(written);
  };
}

/**
 * PUT /api/workspaces/:id/archive?path=DIR: the body, a tar stream, extracted into DIR (made with
 * its parents) entry by entry. A refusal stops at its entry; the entries before it stay, and the
 * answer (and the event) count them.
 */
function putWorkspaceArchive(deps: WorkspaceRouteDeps): RequestHandler {
  return async (req, res) => {
    const check = queryCheck(req, ['path']);
    const rel = requiredPath(check);
    if (refuseQuery(res, check) || rel === null) return;
    const target = deps.workspaces.fileTarget(String(req.params['id']), rel, { top: true });
    if (!target.ok) return sendFailure(res, target);
    const extracted = await deps.workspaces.extractArchive(target.workspace, rel, req);
    if (!extracted.ok) {
      if (extracted.reason === 'io_error')
        requestLogger(res, deps.logger).error('archive extraction failed', { detail: extracted.detail });
      // The rest of the body is not read: the connection ends with the answer.
      if (!req.readableEnded) res.setHeader('Connection', 'close');
      return sendFailure(res, {
        reason: extracted.reason,
        detail: extracted.detail,
        ...(extracted.reason === 'invalid_archive' ? { field: 'body' } : {}),
      });
    }
    const { files, directories, bytes } = extracted;
    res.status(200).json({ path: rel, files, directories, bytes });
  };
}

/**
 * GET /api/workspaces/:id/archive[?path=DIR]: DIR's subtree as a tar stream, written as the walk
 * goes (backpressure from the client paces it).
 */
function getWorkspaceArchive(deps: WorkspaceRouteDeps): RequestHandler {
  return async (req, res) => {
    const check = queryCheck(req, ['path']);
    const rel = check.get('path') ?? '';
    if (refuseQuery(res, check)) return;
    const target = deps.workspaces.fileTarget(String(req.params['id']), rel, { top: true });
    if (!target.ok) return sendFailure(res, target);
    const opened = deps.workspaces.openArchive(target.workspace, rel);
    if (!opened.ok) return sendFailure(res, opened);
    const { source } = opened;
    res.status(200).setHeader('Content-Type', 'application/x-tar');
    let complete = false;
    try {
      for (const chunk of source.chunks()) {
        if (res.destroyed) break;
        if (!res.write(chunk)) await Promise.race([once(res, 'drain'), once(res, 'close')]);
      }
      complete = !res.destroyed;
      res.end();
    } catch (error) {
      requestLogger(res, deps.logger).error('archive read failed', { detail: String(error) });
      res.destroy();
    } finally {
      source.close();
      deps.workspaces.archiveRead(target.workspace, rel, source, complete);
    }
  };
}

export function registerWorkspaceRoutes(router: Router, deps: WorkspaceRouteDeps): void {
  const json = express.json({ limit: MAX_BODY_BYTES, strict: true });
  route(router, '/api/workspaces', { post: [json, createWorkspace(deps)], get: listWorkspaces(deps) });
  route(router, '/api/workspaces/:id', { get: showWorkspace(deps), delete: [refuseBody, deleteWorkspace(deps)] });
  route(router, '/api/workspaces/:id/files', {
    get: readWorkspaceFile(deps),
    put: writeWorkspaceFile(deps),
    post: [refuseBody, makeWorkspaceDirectory(deps)],
    delete: [refuseBody, deleteWorkspaceFile(deps)],
  });
  route(router, '/api/workspaces/:id/archive', {
    get: [refuseBody, getWorkspaceArchive(deps)],
    put: putWorkspaceArchive(deps),
  });
}
