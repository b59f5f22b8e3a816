/**
 * The operator status page: plain HTML, CSS and JavaScript from the package's `ui/` directory,
 * served by the supervisor itself (same origin as the API it reads), no framework and nothing
 * fetched from elsewhere. Every page answer carries a Content-Security-Policy of
 * `default-src 'self'` (no inline script or style, no other origin), refuses framing and
 * sniffing, and is not cached.
 *
 * Routes (all public; the data behind them is not): `GET /` → `/ui/`; `GET /ui/` the page;
 * `GET /ui/login` the sign-in form; `GET /ui/<asset>`; `POST /ui/session` (form field `token`)
 * signs in: a matching token gets a session cookie (ui-session.ts) and a 303 to `/ui/`, a wrong
 * one a 303 back to the form; `POST /ui/session/end` signs out. Both POSTs refuse an `Origin`
 * other than the page's own.
 */
import fs from 'node:fs';
import path from 'node:path';
import express, { type Express, type Response } from 'express';
import type { Logger } from '../../core/log.js';
import { tokenMatches } from './auth.js';
import { sendError } from './errors.js';
import { requestLogger } from './request-id.js';
import { route } from './routing.js';
import { clearedSessionCookie, sameOrigin, sessionCookie, sessionFromCookie, type UiSessions } from './ui-session.js';

const CONTENT_SECURITY_POLICY = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const ASSETS: Record<string, { file: string; type: string }> = {
  '/ui/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/ui/login': { file: 'login.html', type: 'text/html; charset=utf-8' },
  '/ui/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
  '/ui/login.js': { file: 'login.js', type: 'text/javascript; charset=utf-8' },
  '/ui/app.css': { file: 'app.css', type: 'text/css; charset=utf-8' },
};

function pageHeaders(res: Response): void {
  res.setHeader('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('X-Frame-Options', 'DENY');
  // same-origin, not no-referrer: under no-referrer browsers send `Origin: null` with the sign-in form, which
  // the origin check must then refuse.
  res.setHeader('Referrer-Policy', 'same-origin');
  res.setHeader('Cache-Control', 'no-store');
}

const TOKEN_HINT = /<p class="hint" id="token-hint">[\s\S]*?<\/p>/;

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

/**
 * The sign-in form names where this server's token is: its own token file (the packaged path
 * only for the packaged data directory), or the configuration when `apiToken` sets it. Done
 * here, in the served HTML, so the page needs no script for it and its policy stays unchanged.
 */
function withTokenHint(login: Buffer, tokenFile: string | null): Buffer {
  const where =
    tokenFile === null
      ? "The token is <code>apiToken</code> in this server's configuration."
      : `The token is in <code id="token-file">${escapeHtml(tokenFile)}</code> on the server.`;
  const html = login.toString('utf8');
  if (!TOKEN_HINT.test(html)) return login;
  return Buffer.from(html.replace(TOKEN_HINT, `<p class="hint" id="token-hint">${where}</p>`), 'utf8');
}

/** The page's files, read once: they ship with the package and do not change while it runs. */
function loadAssets(dir: string, logger: Logger): Map<string, { body: Buffer; type: string }> {
  const loaded = new Map<string, { body: Buffer; type: string }>();
  for (const [urlPath, asset] of Object.entries(ASSETS)) {
    try {
      loaded.set(urlPath, { body: fs.readFileSync(path.join(dir, asset.file)), type: asset.type });
    } catch (error) {
      logger.warn('status page file missing; the page is not served', {
        file: path.join(dir, asset.file),
        error: (error as NodeJS.ErrnoException).code ?? (error as Error).message,
      });
      return new Map();
    }
  }
  return loaded;
}

export function registerStatusPage(
  app: Express,
  deps: { uiDir: string; token: string; tokenFile: string | null; sessions: UiSessions; logger: Logger },
): void {
  const assets = loadAssets(deps.uiDir, deps.logger);
  const login = assets.get('/ui/login');
  if (login !== undefined) assets.set('/ui/login', { ...login, body: withTokenHint(login.body, deps.tokenFile) });
  const router = express.Router();
  route(router, '/', { get: (_req, res) => res.redirect(302, '/ui/') });
  for (const urlPath of Object.keys(ASSETS)) {
    route(router, urlPath, {
      get: (_req, res) => {
        const asset = assets.get(urlPath);
        if (asset === undefined) return sendError(res, 404, 'not_found', 'the status page is not installed');
        pageHeaders(res);
        res.type(asset.type).send(asset.body);
      },
    });
  }
  const form = express.urlencoded({ extended: false, limit: 4096, parameterLimit: 4 });
  route(router, '/ui/session', {
    post: [
      (req, res, next) => {
        if (!sameOrigin(req.headers, { required: false }))
          return sendError(res, 403, 'forbidden', 'origin: sign-in is accepted from this page only');
        next();
      },
      form,
      (req, res) => {
        pageHeaders(res);
        const token = (req.body as Record<string, unknown> | undefined)?.['token'];
        if (typeof token !== 'string' || !tokenMatches(token.trim(), deps.token)) {
          requestLogger(res, deps.logger).warn('status page sign-in refused: wrong token');
          return res.redirect(303, '/ui/login#failed');
        }
        const session = deps.sessions.create();
        res.setHeader('Set-Cookie', sessionCookie(session.id, session.maxAgeSeconds));
        requestLogger(res, deps.logger).info('status page sign-in');
        res.redirect(303, '/ui/');
      },
    ],
  });
  route(router, '/ui/session/end', {
    post: (req, res) => {
      if (!sameOrigin(req.headers, { required: false }))
        return sendError(res, 403, 'forbidden', 'origin: sign-out is accepted from this page only');
      deps.sessions.revoke(sessionFromCookie(req.headers));
      res.setHeader('Set-Cookie', clearedSessionCookie());
      pageHeaders(res);
      res.redirect(303, '/ui/login');
    },
  });
  app.use(router);
}
