import fs from 'node:fs';
import path from 'node:path';
import type { Express } from 'express';
import t from 'tap';
import { buildOpenApi, renderOpenApi, routeErrorCodes } from '../../../api/openapi.js';
import { ERROR_CODES, ERROR_STATUS, ROUTES } from '../../../api/schema/index.js';
import { createMemoryLogger } from '../../../core/log.js';
import { defaultConfig } from '../../../supervisor/config/load.js';
import { contractProblems } from '../../support/api-contract.js';
import { testApp } from '../../support/app-server.js';
import { REPO_ROOT } from '../../support/turn-harness.js';

const pkg = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };

interface Layer {
  route?: { path: string; methods: Record<string, boolean> };
  handle: { stack?: Layer[] };
}

/** Every method and path the app routes, walking nested routers; `_all` is the 405 fallback. */
function servedRoutes(app: Express): string[] {
  const found: string[] = [];
  const walk = (stack: Layer[]): void => {
    for (const layer of stack) {
      if (layer.route !== undefined) {
        for (const method of Object.keys(layer.route.methods))
          if (method !== '_all') found.push(`${method.toUpperCase()} ${layer.route.path}`);
      } else if (Array.isArray(layer.handle.stack)) walk(layer.handle.stack);
    }
  };
  walk((app as unknown as { router: { stack: Layer[] } }).router.stack);
  return found;
}

/** An app with every optional part, so every route is registered (nothing is served). */
function fullApp(): Express {
  const { logger } = createMemoryLogger();
  const stub = {} as never;
  return testApp({
    config: defaultConfig({ installed: false, cwd: '/tmp' }),
    logger,
    store: stub,
    turns: stub,
    workspaces: stub,
    metrics: stub,
    activity: stub,
  });
}

t.test('the committed docs/openapi.json is the generated one (run `npm run openapi`)', async (t) => {
  const committed = fs.readFileSync(path.join(REPO_ROOT, 'docs/openapi.json'), 'utf8');
  t.ok(committed === renderOpenApi(pkg.version), 'docs/openapi.json is not stale');
});

t.test('the document has exactly the routes the app serves', async (t) => {
  const documented = ROUTES.map((r) => `${r.method.toUpperCase()} ${r.path}`).sort();
  const served = servedRoutes(fullApp())
    .filter((r) => / \/api\/| \/metrics$/.test(r))
    .sort();
  t.same(documented, served);
  t.ok(documented.includes('PUT /api/turns/:id/files'));
});

t.test('every error code is documented on some route, with one status', async (t) => {
  // forbidden: only the status page's sign-in answers it, and the page is outside the document.
  const used = new Set([...ROUTES.flatMap((route) => routeErrorCodes(route)), 'forbidden']);
  t.same(
    ERROR_CODES.filter((code) => !used.has(code)),
    [],
  );
  const document = buildOpenApi() as { paths: Record<string, Record<string, { responses: object }>> };
  t.equal(document.paths['/api/turns/{id}/files']?.['put']?.responses !== undefined, true);
});

t.test('every route of the document appears in docs/http-api.md', async (t) => {
  const text = fs.readFileSync(path.join(REPO_ROOT, 'docs/http-api.md'), 'utf8');
  for (const route of ROUTES) {
    const mention = `${route.method.toUpperCase()} ${route.path}`;
    t.ok(new RegExp(`${mention.replace(/[.?*+]/g, '\\$&')}(?![A-Za-z0-9/_-])`).test(text), mention);
  }
});

t.test("docs/http-api.md's error table lists every code with the document's status", async (t) => {
  const text = fs.readFileSync(path.join(REPO_ROOT, 'docs/http-api.md'), 'utf8');
  const listed = new Map<string, number[]>();
  for (const row of text.matchAll(/^\| (\d{3}) \| ([^|]+) \|/gm))
    for (const code of row[2]!.matchAll(/`([a-z_]+)`/g))
      listed.set(code[1]!, [...(listed.get(code[1]!) ?? []), Number(row[1])]);
  // A code may appear on several rows (by route), always with its one status.
  for (const code of ERROR_CODES) t.same([...new Set(listed.get(code) ?? [])], [ERROR_STATUS[code]], code);
  t.same(
    [...listed.keys()].filter((code) => !(ERROR_CODES as readonly string[]).includes(code)),
    [],
    'no code the API does not have',
  );
});

t.test('the contract check catches bodies, codes and headers the document does not allow', async (t) => {
  const headers = { 'x-request-id': 'r1' };
  const health = JSON.stringify({ status: 'ok', uptime: 1, timestamp: new Date().toISOString() });
  t.same(contractProblems('GET', '/api/health', 200, headers, health), []);
  t.match(contractProblems('GET', '/api/health', 200, headers, '{"status":"ok"}'), [/required property/]);
  t.match(contractProblems('GET', '/api/health', 200, {}, health), [/X-Request-Id/]);
  t.match(contractProblems('GET', '/api/health', 200, { ...headers, 'access-control-allow-origin': '*' }, health), [
    /no CORS/,
  ]);
  const conflict = JSON.stringify({ error: 'x', code: 'conflict' });
  t.match(contractProblems('GET', '/api/turns/a', 409, headers, conflict), [/not documented for this route/]);
  t.match(contractProblems('GET', '/api/turns/a', 400, headers, conflict), [/documented as 409/]);
  t.match(contractProblems('GET', '/api/turns/a', 404, headers, '{"error":"x","code":"nope"}'), [/error body/]);
  const unauthenticated = JSON.stringify({ error: 'x', code: 'unauthenticated' });
  t.match(contractProblems('GET', '/api/status', 401, headers, unauthenticated), [/WWW-Authenticate/]);
  t.same(
    contractProblems('GET', '/api/status', 401, { ...headers, 'www-authenticate': 'Bearer' }, unauthenticated),
    [],
  );
  const turn = JSON.stringify({ turn: { id: 'a' } });
  t.ok(contractProblems('POST', '/api/turns', 201, headers, turn).some((p) => /Location/.test(p)));
  t.same(contractProblems('GET', '/ui/', 200, {}, '<html>'), [], 'the status page is outside the document');
});
