import fs from 'node:fs';
import path from 'node:path';
import type { Express } from 'express';
import t from 'tap';
import { buildOpenApi, renderOpenApi, routeErrorCodes, WEBSOCKET_EXTENSION } from '../../../api/openapi.js';
import { Type } from '@sinclair/typebox';
import { ERROR_CODES, ERROR_STATUS, ROUTES, type ApiRoute } from '../../../api/schema/index.js';
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

type Operation = Record<string, unknown> & {
  responses: Record<string, { content?: Record<string, { schema: object }> }>;
};
const operations = (): Array<[string, Operation]> =>
  Object.entries((buildOpenApi() as { paths: Record<string, Record<string, Operation>> }).paths).flatMap(
    ([path, methods]) => Object.entries(methods).map(([method, op]): [string, Operation] => [`${method} ${path}`, op]),
  );

// Redocly's operation-2xx-response is off (redocly.yaml) because a WebSocket endpoint answers
// only 101; this holds every other operation to it.
t.test('a WebSocket operation answers 101 alone; every other one has a 2XX answer', async (t) => {
  for (const [where, op] of operations()) {
    const statuses = Object.keys(op.responses).filter((status) => /^[12]/.test(status));
    if (op[WEBSOCKET_EXTENSION] !== undefined) t.same(statuses, ['101'], where);
    else t.ok(statuses.length > 0 && statuses.every((status) => status.startsWith('2')), where);
  }
  t.same(
    operations()
      .filter(([, op]) => op[WEBSOCKET_EXTENSION] !== undefined)
      .map(([where]) => where)
      .sort(),
    ['get /api/governance/events/stream', 'get /api/turns/{id}/attach'],
  );
});

t.test(
  'every JSON body and WebSocket message is a $ref to a component, and every component is referenced',
  async (t) => {
    const document = buildOpenApi() as { components: { schemas: Record<string, unknown> } };
    const text = JSON.stringify(document);
    for (const [where, op] of operations()) {
      const bodies = [
        ...Object.values(op.responses).map((answer) => answer.content?.['application/json']?.schema),
        (op['requestBody'] as { content: Record<string, { schema: object }> } | undefined)?.content['application/json']
          ?.schema,
      ].filter((schema): schema is object => schema !== undefined);
      for (const schema of bodies) {
        const root = 'allOf' in schema ? (schema.allOf as object[])[0]! : schema;
        t.match(root, { $ref: /^#\/components\/schemas\/[A-Za-z0-9]+$/ }, where);
      }
      const socket = op[WEBSOCKET_EXTENSION] as { messages: Record<string, object> } | undefined;
      for (const message of Object.values(socket?.messages ?? {}))
        t.match(message, { $ref: /^#\/components\/schemas\// }, where);
    }
    for (const name of Object.keys(document.components.schemas))
      t.ok(text.includes(`"#/components/schemas/${name}"`), `${name} is referenced`);
    t.ok(document.components.schemas['OpenApiDocument'], 'a titled answer keeps its title as its name');
  },
);

t.test('an untitled JSON body is named after its operation; two schemas under one title are refused', async (t) => {
  const route: ApiRoute = {
    method: 'post',
    path: '/api/things',
    operationId: 'makeThing',
    summary: 'A route with untitled bodies.',
    auth: 'token',
    body: { contentType: 'application/json', schema: Type.Object({ name: Type.String() }) },
    responses: { 201: { description: 'Made.', schema: Type.Object({ id: Type.String() }) } },
    errors: [],
  };
  const document = buildOpenApi('1', [route]) as {
    paths: Record<string, Record<string, { requestBody: object; responses: Record<string, object> }>>;
    components: { schemas: Record<string, unknown> };
  };
  const made = document.paths['/api/things']!['post']!;
  t.match(made.requestBody, {
    content: { 'application/json': { schema: { $ref: '#/components/schemas/MakeThingRequest' } } },
  });
  t.match(made.responses['201'], {
    content: { 'application/json': { schema: { $ref: '#/components/schemas/MakeThingAnswer201' } } },
  });
  t.same(Object.keys(document.components.schemas).sort(), [
    'ErrorBody',
    'FieldError',
    'MakeThingAnswer201',
    'MakeThingRequest',
  ]);

  const clash: ApiRoute = {
    ...route,
    path: '/api/other',
    operationId: 'other',
    body: { contentType: 'application/json', schema: Type.Object({ other: Type.Integer() }, { title: 'FieldError' }) },
  };
  t.throws(() => buildOpenApi('1', [route, clash]), /two different schemas are named FieldError/);
});
