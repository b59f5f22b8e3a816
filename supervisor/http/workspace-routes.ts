/**
 * Workspace routes (docs/http-api.md, "Workspaces"; decisions in docs/workspaces.md):
 *   POST   /api/workspaces                   { sessionId?, id? } → 201, Location
 *   GET    /api/workspaces[?session=ID]       list
 *   GET    /api/workspaces/:id                one, with its usage
 *   DELETE /api/workspaces/:id[?cancel=1]     409 workspace_busy while a turn runs, unless cancel
 *   PUT    /api/workspaces/:id/files?path=REL[&mode=create|replace]   host write (raw body)
 *   GET    /api/workspaces/:id/files?path=REL                         host read (raw bytes)
 * Registered ahead of the app's 1 MiB body cap: the file routes enforce fs.hostWriteMaxBytes
 * themselves, the JSON route its own 1 MiB parser limit.
 */
import express, { type Request, type Response, type Router } from 'express';
import type { EventSink } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import type { TurnhostConfig } from '../config/types.js';
import { closeRoot, openRoot, readFile, validateRelativePath, writeFile, type FsRefusal } from '../fs/guard.js';
import type { WorkspaceFailure, WorkspaceService, WorkspaceView } from '../workspaces/service.js';
import { MAX_BODY_BYTES, sendError, type ErrorCode } from './errors.js';
import { requestLogger } from './request-id.js';
import { refuseBody, route } from './routing.js';
import { QueryCheck, requestQuery, sendQueryRefusal } from './query-params.js';
import { compileValidator, createAjv, fieldRefusal } from '../../api/schema/validate.js';
import { WorkspaceCreateRequest } from '../../api/schema/workspaces.js';

export interface WorkspaceRouteDeps {
  workspaces: WorkspaceService;
  config: () => TurnhostConfig;
  events: EventSink;
  logger: Logger;
}

const ID = /^[A-Za-z0-9_-]{1,64}$/;
const SESSION_ID = /^[A-Za-z0-9_.:-]{1,128}$/;
const validateCreate = compileValidator<WorkspaceCreateRequest>(createAjv(), WorkspaceCreateRequest);

const FAILURE_STATUS: Record<WorkspaceFailure, number> = {
  invalid_request: 400,
  workspace_not_found: 404,
  workspace_exists: 409,
  workspace_busy: 409,
  workspace_full: 409,
  workspaces_unconfigured: 503,
  workspaces_unavailable: 503,
};

const FS_CODE = (reason: FsRefusal): ErrorCode =>
  reason === 'too_large'
    ? 'body_too_large'
    : reason === 'invalid_option'
      ? 'invalid_request'
      : reason === 'io_error'
        ? 'internal_error'
        : reason;

const FS_STATUS: Record<FsRefusal, number> = {
  invalid_path: 400,
  invalid_option: 400,
  too_large: 413,
  not_found: 404,
  exists: 409,
  stale_base: 409,
  topology_changed: 409,
  alias_denied: 409,
  not_a_directory: 409,
  io_error: 500,
};

function sendFailure(res: Response, failure: { reason: WorkspaceFailure; detail: string }): void {
  const extra = failure.reason === 'invalid_request' ? { field: failure.detail.split(':')[0] } : {};
  sendError(res, FAILURE_STATUS[failure.reason], failure.reason, failure.detail, extra);
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

export function registerWorkspaceRoutes(router: Router, deps: WorkspaceRouteDeps): void {
  const json = express.json({ limit: MAX_BODY_BYTES, strict: true });
  const { workspaces } = deps;
  /** The workspace of the path, when it is ready (or, for a delete, also half deleted: a retry). */
  const lookup = (req: Request, res: Response, options: { deleting?: boolean } = {}): WorkspaceView | null => {
    const id = String(req.params['id']);
    const found = ID.test(id) ? workspaces.get(id) : undefined;
    if (!found || !(found.state === 'ready' || (options.deleting === true && found.state === 'deleting'))) {
      sendError(res, 404, 'workspace_not_found', `no workspace ${ID.test(id) ? id : '(malformed id)'}`);
      return null;
    }
    return found;
  };

  route(router, '/api/workspaces', {
    post: [
      json,
      async (req, res) => {
        // No body asks for a generated id and no session; a body must be JSON.
        if (req.is('application/json') === false)
          return sendError(res, 400, 'invalid_request', 'body: expected an application/json object', { field: 'body' });
        const body: unknown = req.body ?? {};
        const checked = validateCreate(body);
        if (!checked.ok) {
          const { error, ...named } = fieldRefusal(checked.errors);
          return sendError(res, 400, 'invalid_request', error, named);
        }
        const { sessionId, id } = checked.value;
        const created = await workspaces.create({
          ...(typeof id === 'string' ? { id } : {}),
          ...(typeof sessionId === 'string' ? { sessionId } : {}),
        });
        if (!created.ok) return sendFailure(res, created);
        res.setHeader('Location', `/api/workspaces/${created.workspace.id}`);
        res.status(201).json({ workspace: publicView(created.workspace) });
      },
    ],
    get: (req, res) => {
      const check = queryCheck(req, ['session']);
      const session = check.get('session');
      if (session !== null && !SESSION_ID.test(session))
        check.refuse('session', 'expected 1-128 characters of [A-Za-z0-9_.:-]');
      if (refuseQuery(res, check)) return;
      const listed = workspaces.list(session === null ? {} : { sessionId: session }).filter((w) => w.state === 'ready');
      res.json({ workspaces: listed.map((w) => publicView(w)) });
    },
  });

  route(router, '/api/workspaces/:id', {
    get: async (req, res) => {
      if (refuseQuery(res, queryCheck(req, []))) return;
      const workspace = lookup(req, res);
      if (!workspace) return;
      const usage = await workspaces.usage(workspace.id);
      res.json({ workspace: publicView(workspace, usage.ok ? usage : null) });
    },
    delete: [
      refuseBody,
      async (req, res) => {
        const check = queryCheck(req, ['cancel']);
        const cancel = check.get('cancel');
        if (cancel !== null && cancel !== '1' && cancel !== '0') check.refuse('cancel', "expected '1' or '0'");
        if (refuseQuery(res, check)) return;
        const workspace = lookup(req, res, { deleting: true });
        if (!workspace) return;
        const removed = await workspaces.delete(workspace.id, { cancel: cancel === '1' });
        if (!removed.ok) return sendFailure(res, removed);
        res.json({ deleted: workspace.id, bytesRemoved: removed.bytes, filesRemoved: removed.files });
      },
    ],
  });

  route(router, '/api/workspaces/:id/files', {
    get: (req, res) => {
      const check = queryCheck(req, ['path']);
      const rel = check.get('path');
      if (rel === null) check.refuse('path', 'required');
      if (refuseQuery(res, check) || rel === null) return;
      const valid = validateRelativePath(rel);
      if (!valid.ok) return sendError(res, 400, 'invalid_path', `path: ${valid.detail}`, { field: 'path' });
      const workspace = lookup(req, res);
      if (!workspace) return;
      const root = openRoot(workspace.path);
      if (!root.ok) return sendError(res, 503, 'workspaces_unavailable', root.detail);
      try {
        const read = readFile(root, rel, deps.config().fs.hostWriteMaxBytes);
        if (!read.ok) return sendError(res, FS_STATUS[read.reason], FS_CODE(read.reason), read.detail);
        res.setHeader('Content-Type', 'application/octet-stream');
        res.setHeader('X-Content-Sha256', read.sha256);
        res.status(200).send(read.data);
      } finally {
        closeRoot(root);
      }
    },
    put: async (req, res) => {
      const check = queryCheck(req, ['path', 'mode']);
      const rel = check.get('path');
      if (rel === null) check.refuse('path', 'required');
      const mode = check.get('mode') ?? 'replace';
      if (mode !== 'create' && mode !== 'replace') check.refuse('mode', "expected 'create' or 'replace'");
      if (refuseQuery(res, check) || rel === null || (mode !== 'create' && mode !== 'replace')) return;
      const valid = validateRelativePath(rel);
      if (!valid.ok) return sendError(res, 400, 'invalid_path', `path: ${valid.detail}`, { field: 'path' });
      const workspace = lookup(req, res);
      if (!workspace) return;
      const config = deps.config();
      const maxBytes = config.fs.hostWriteMaxBytes;
      if (Number(req.headers['content-length'] ?? 0) > maxBytes) {
        res.setHeader('Connection', 'close');
        return sendError(res, 413, 'body_too_large', `body: larger than ${maxBytes} bytes (fs.hostWriteMaxBytes)`);
      }
      const body = await readBody(req, maxBytes);
      if (body === 'aborted') return void res.destroy();
      if (body === 'too_large') {
        res.setHeader('Connection', 'close');
        return sendError(res, 413, 'body_too_large', `body: larger than ${maxBytes} bytes (fs.hostWriteMaxBytes)`);
      }
      const usage = await workspaces.usage(workspace.id);
      if (!usage.ok) return sendFailure(res, usage);
      if (usage.bytes + body.length > config.workspaces.maxBytes)
        return sendError(
          res,
          409,
          'workspace_full',
          `workspace ${workspace.id} holds ${usage.bytes} bytes; ${body.length} more exceed its cap of ${config.workspaces.maxBytes} (workspaces.maxBytes)`,
        );
      // The reads above awaited: a delete may have begun meanwhile. From this check to the end of
      // the write nothing yields, so the write never lands in a tree being removed.
      if (workspaces.get(workspace.id)?.state !== 'ready')
        return sendError(res, 404, 'workspace_not_found', `no workspace ${workspace.id} (being deleted)`);
      const root = openRoot(workspace.path);
      if (!root.ok) return sendError(res, 503, 'workspaces_unavailable', root.detail);
      try {
        // 0666 inside a 02770 workspace: the directory admits only the workspace's uid and the
        // supervisor's group, and the workspace's turns (its uid) must be able to change the file.
        const written = writeFile(root, rel, body, { mode, maxBytes, fileMode: 0o666 });
        if (!written.ok) {
          if (written.reason === 'io_error')
            requestLogger(res, deps.logger).error('workspace write failed', { detail: written.detail });
          return sendError(res, FS_STATUS[written.reason], FS_CODE(written.reason), written.detail);
        }
        deps.events.append({
          sessionId: workspace.sessionId,
          turnId: null,
          kind: 'host_write',
          actor: 'server',
          model: null,
          profile: null,
          payload: { path: rel, bytes: written.bytes, sha256: written.sha256, replaced: written.replaced },
        });
        // The file's own address: GET reads it, PUT (replace by default) writes it again.
        if (!written.replaced)
          res.setHeader(
            'Location',
            `/api/workspaces/${encodeURIComponent(workspace.id)}/files?${new URLSearchParams({ path: rel }).toString()}`,
          );
        res.status(written.replaced ? 200 : 201).json(written);
      } finally {
        closeRoot(root);
      }
    },
  });
}
