/**
 * The express application: every route, authentication, the body cap and the error shape.
 * Dependencies are parameters so tests can inject fakes (a throwing probe, a fake turn manager);
 * the daemon passes the real ones. Each group of routes is registered by a function of its own.
 */
import express, {
  type ErrorRequestHandler,
  type Express,
  type NextFunction,
  type Request,
  type RequestHandler,
  type Response,
  type Router,
} from 'express';
import type { Logger } from '../../core/log.js';
import type { Result } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import type { EventStore } from '../events/types.js';
import type { WorkerHostStatus } from '../probes/types.js';
import { capacityStatus } from '../probes/capacity.js';
import type { CapacityChoice } from '../config/capacity.js';
import type { TurnManager } from '../turns/types.js';
import type { WorkspaceService } from '../workspaces/service.js';
import { requireToken } from './auth.js';
import { MAX_BODY_BYTES, sendError } from './errors.js';
import { parseEventQuery } from './event-query.js';
import { requestQuery, sendQueryRefusal } from './query-params.js';
import type { HostFacts } from './host-facts.js';
import { route } from './routing.js';
import { registerTurnRoutes } from './turn-routes.js';
import { registerSessionRoutes } from './session-routes.js';
import { registerHostWriteRoute } from './host-write-route.js';
import { registerWorkspaceRoutes } from './workspace-routes.js';
import type { Activity } from '../observe/activity.js';
import type { Metrics } from '../observe/metrics.js';
import { registerMetricsRoute } from './metrics-route.js';
import { hostCapacity, registerDrainRoute, registerReadyRoute } from './placement-routes.js';
import { registerStatusPage } from './status-page.js';
import { workerHostCheck } from './worker-host-check.js';
import type { UiSessions } from './ui-session.js';
import { requestIds, requestLogger } from './request-id.js';
import { renderOpenApi } from '../../api/openapi.js';

interface SoftwareIdentity {
  release: string;
  sourceCommit: string;
}

export interface AppDeps {
  config: TurnhostConfig;
  logger: Logger;
  store: EventStore;
  /** Re-runs the probes (trigger "check") and records the answer as the latest status. */
  probes: () => Promise<WorkerHostStatus>;
  /** Re-runs the probes and the attack battery (`POST /api/status/worker-host` with `attack`). */
  attack?: () => Promise<Result<{ status: WorkerHostStatus }>>;
  /** The latest probe answer, or null when the boot probe failed and no check has run since. */
  latestStatus: () => WorkerHostStatus | null;
  /** Where the running `turns.maxConcurrent` came from; the status reports it with the uid range's cap when given. */
  capacity?: () => CapacityChoice;
  /** Turn routes exist only when a turn manager is given. */
  turns?: TurnManager;
  /** Workspace routes exist only when a workspace service is given. */
  workspaces?: WorkspaceService;
  software: SoftwareIdentity;
  host: HostFacts;
  token: string;
  /** `GET /metrics` is served when given. */
  metrics?: Metrics;
  /** `GET /api/activity` (running turns, recent denials and events) is served when given. */
  activity?: Activity;
  /** The operator status page: its files' directory and the sign-in sessions. */
  /** `tokenFile`: where this server's token is, named on the sign-in form; null when `apiToken` configures it. */
  statusPage?: { uiDir: string; sessions: UiSessions; tokenFile: string | null };
}

/** WebSocket paths answer 426 to plain HTTP. */
const upgradeRequired: RequestHandler = (_req, res) => {
  res.setHeader('Upgrade', 'websocket');
  sendError(res, 426, 'upgrade_required', 'this path takes a WebSocket upgrade');
};

const bodyCap: RequestHandler = (req, res, next) => {
  const length = Number(req.headers['content-length'] ?? 0);
  if (length > MAX_BODY_BYTES) {
    res.setHeader('Connection', 'close');
    return sendError(res, 413, 'body_too_large', `body: larger than ${MAX_BODY_BYTES} bytes`);
  }
  next();
};

function accessLog(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      // The path only: query strings, headers and bodies are never logged.
      requestLogger(res, logger).info('http request', {
        method: req.method,
        path: req.path,
        status: res.statusCode,
        ms: Number((process.hrtime.bigint() - started) / 1000n) / 1000,
      });
    });
    next();
  };
}

/**
 * No route takes an encoded body: JSON bodies are small, and host writes take the raw bytes.
 * Refusing every encoding here, before any parser, means a body that does not decode can never
 * reach a parser's error path (a broken brotli stream was once a 500).
 */
function refuseContentEncoding(req: Request, res: Response, next: NextFunction): void {
  const encoding = req.headers['content-encoding'];
  if (encoding === undefined || encoding.trim().toLowerCase() === 'identity') return next();
  res.setHeader('Connection', 'close');
  sendError(res, 415, 'unsupported_media_type', 'content-encoding: bodies are taken as sent, without an encoding', {
    field: 'content-encoding',
  });
}

function errorHandler(logger: Logger): ErrorRequestHandler {
  return (error, req, res, _next) => {
    const type = (error as { type?: unknown }).type;
    if (type === 'entity.too.large')
      return sendError(res, 413, 'body_too_large', `body: larger than ${MAX_BODY_BYTES} bytes`);
    // The parser's message quotes the body, so it is neither logged nor answered.
    if (type === 'entity.parse.failed') return sendError(res, 400, 'invalid_request', 'body: not valid JSON');
    if (type === 'encoding.unsupported' || type === 'charset.unsupported')
      return sendError(res, 415, 'unsupported_media_type', 'body: unsupported encoding or charset');
    requestLogger(res, logger).error('request failed', {
      method: req.method,
      path: req.path,
      error: error instanceof Error ? (error.stack ?? error.message) : String(error),
    });
    if (res.headersSent) return res.destroy();
    sendError(res, 500, 'internal_error', 'internal error; the supervisor log has the details');
  };
}

/** Workspaces on this host, whatever their state: placement keeps their sessions here. */
function workspacesHeld(deps: AppDeps): () => number {
  return () => deps.workspaces?.list().length ?? 0;
}

export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  // No CORS: the API is for same-host callers with a bearer token, so no Access-Control-*
  // header is ever sent and a browser's cross-origin request fails in the browser.
  app.use(requestIds(deps.logger));
  app.use(accessLog(deps.logger));
  app.use(publicRoutes(deps));
  if (deps.statusPage !== undefined)
    registerStatusPage(app, { ...deps.statusPage, token: deps.token, logger: deps.logger });
  app.use(authentication(deps));
  app.use(refuseContentEncoding);
  registerUncappedRoutes(app, deps);
  app.use(bodyCap);
  app.use(apiRoutes(deps));
  app.use((req, res) => sendError(res, 404, 'not_found', `no route ${req.method} ${req.path}`));
  app.use(errorHandler(deps.logger));
  return app;
}

/** Health and readiness: answered without a token. */
function publicRoutes(deps: AppDeps): Router {
  const router = express.Router();
  route(router, '/api/health', {
    get: (_req, res) => {
      res.json({ status: 'ok', uptime: process.uptime(), timestamp: new Date().toISOString() });
    },
  });
  registerReadyRoute(router, {
    latestStatus: deps.latestStatus,
    ...(deps.turns ? { turns: deps.turns } : {}),
    workspacesHeld: workspacesHeld(deps),
  });
  return router;
}

/**
 * Every route below needs the token (or a status-page session). A CORS preflight carries no
 * credentials: it passes authentication only to reach the 405 (known path) or 404 answer; no
 * route serves OPTIONS.
 */
function authentication(deps: AppDeps): RequestHandler {
  const authenticate = requireToken(deps.token, deps.statusPage?.sessions);
  return (req, res, next) => (req.method === 'OPTIONS' ? next() : authenticate(req, res, next));
}

/** Routes registered ahead of the 1 MiB body cap: each enforces config.fs.hostWriteMaxBytes itself. */
function registerUncappedRoutes(app: Express, deps: AppDeps): void {
  if (deps.turns !== undefined)
    registerHostWriteRoute(app, {
      turns: deps.turns,
      events: deps.store,
      maxBytes: deps.config.fs.hostWriteMaxBytes,
      logger: deps.logger,
    });
  if (deps.workspaces !== undefined)
    registerWorkspaceRoutes(app, { workspaces: deps.workspaces, config: () => deps.config, logger: deps.logger });
}

/** The authenticated API under the body cap. */
function apiRoutes(deps: AppDeps): Router {
  const api = express.Router();
  registerStatusRoutes(api, deps);
  registerEventRoutes(api, deps.store);
  if (deps.activity !== undefined) registerActivityRoute(api, deps.activity);
  if (deps.metrics !== undefined) registerMetricsRoute(api, deps.metrics);
  if (deps.turns !== undefined) {
    registerTurnRoutes(api, deps.turns);
    route(api, '/api/turns/:id/attach', { get: upgradeRequired });
    registerSessionRoutes(api, deps.turns);
    registerDrainRoute(api, { turns: deps.turns, workspacesHeld: workspacesHeld(deps) });
  }
  return api;
}

/** The OpenAPI document, the supervisor's status and a fresh worker-host probe. */
function registerStatusRoutes(api: Router, deps: AppDeps): void {
  let openApi: string | undefined;
  route(api, '/api/openapi.json', {
    get: (_req, res) => {
      // docs/openapi.json is this text for the package's own version.
      openApi ??= renderOpenApi(deps.software.release);
      res.type('application/json').send(openApi);
    },
  });
  route(api, '/api/status', {
    get: (_req, res) => {
      res.json({
        software: deps.software,
        host: deps.host,
        runtime: {
          workerHost: deps.latestStatus(),
          events: deps.store.status(),
          ...(deps.turns
            ? {
                capacity: hostCapacity(deps.turns, workspacesHeld(deps)()),
                preparedWorkers: deps.turns.preparedWorkers(),
                egressRelay: deps.turns.egressRelay(),
              }
            : {}),
          ...(deps.capacity ? { concurrency: capacityStatus(deps.config, deps.capacity(), deps.latestStatus()) } : {}),
        },
        uptime: process.uptime(),
      });
    },
  });
  route(api, '/api/status/worker-host', {
    post: workerHostCheck({ probes: deps.probes, ...(deps.attack ? { attack: deps.attack } : {}) }),
  });
}

/** Governance events: a page of them, and the stream (a WebSocket path). */
function registerEventRoutes(api: Router, store: EventStore): void {
  route(api, '/api/governance/events', {
    get: (req, res) => {
      const parsed = parseEventQuery(requestQuery(req), { allowLimit: true });
      if (!parsed.ok) return sendQueryRefusal(res, parsed);
      const page = store.query(parsed.query);
      if (!page.ok) {
        if (page.reason === 'invalid_query') return sendError(res, 400, 'invalid_request', page.detail);
        return sendError(res, 503, 'store_unavailable', page.detail);
      }
      res.json({ events: page.events, nextAfter: page.nextAfter, nextBefore: page.nextBefore });
    },
  });
  route(api, '/api/governance/events/stream', { get: upgradeRequired });
}

/** Running turns, recent denials and recent events. */
function registerActivityRoute(api: Router, activity: Activity): void {
  route(api, '/api/activity', {
    get: (_req, res) => {
      res.json({
        runningTurns: activity.runningTurns(),
        recentDenials: activity.recentDenials(),
        recentEvents: activity.recentEvents(),
      });
    },
  });
}
