/**
 * The OpenAPI 3.1 document, generated from the route table and the schemas. Every JSON body
 * (request, answer, WebSocket message) is a component referenced with `$ref`: a schema with a
 * `title` is `components.schemas.<title>`, an untitled one is named after its operation
 * (`<OperationId>Request`, `<OperationId>Answer<status>`), and only what the paths reference is
 * listed, so no component is unused. WebSocket endpoints appear as their upgrade GET (101) with
 * an `x-turnhost-websocket` extension naming the message components of each direction;
 * `x-error-codes` lists every error code with its status; `x-event-kinds` each governance event
 * kind's payload schema and version. docs/api-schema.md gives the rules.
 */
import type { TSchema } from '@sinclair/typebox';
import { ID_PATTERN } from './schema/ids.js';
import {
  AUTHENTICATED_ERRORS,
  COMMON_ERRORS,
  ERROR_STATUS,
  EVENT_PAYLOADS,
  ErrorBody,
  openApiPath,
  ROUTES,
  type ApiRoute,
  type ErrorCode,
} from './schema/index.js';

type Json = Record<string, unknown>;

/** The extension that marks a WebSocket endpoint; generators of REST clients skip operations carrying it. */
export const WEBSOCKET_EXTENSION = 'x-turnhost-websocket';
/** Where the daemon listens unless configured otherwise (`listen.tcp`). */
const DEFAULT_SERVER = 'http://127.0.0.1:7707';

const ref = (name: string): Json => ({ $ref: `#/components/schemas/${name}` });

/** `createTurn` → `CreateTurn`. */
function pascal(name: string): string {
  return name.charAt(0).toUpperCase() + name.slice(1);
}

/**
 * The named schemas the document references, each rendered once. Two different schemas under
 * one name would make a `$ref` ambiguous, so that is an error naming the title, not a silent pick.
 */
class Components {
  readonly #schemas = new Map<string, Json>();
  readonly #texts = new Map<string, string>();

  /** A `$ref` to `schema` under its title, else under `fallback`; registers it (and what it names) on first use. */
  reference(schema: TSchema, fallback: string): Json {
    const title = schema.title;
    const name = typeof title === 'string' ? title : fallback;
    const rendered = this.#render(schema, true) as Json;
    const text = JSON.stringify(rendered);
    const known = this.#texts.get(name);
    if (known !== undefined && known !== text)
      throw new Error(`two different schemas are named ${name}: give one of them another title`);
    this.#texts.set(name, text);
    this.#schemas.set(name, rendered);
    return ref(name);
  }

  /** A plain JSON copy with every titled sub-schema (other than the top one) replaced by a `$ref`. */
  inline(schema: unknown): unknown {
    return this.#render(schema, true);
  }

  #render(schema: unknown, top: boolean): unknown {
    if (Array.isArray(schema)) return schema.map((item) => this.#render(item, false));
    if (typeof schema !== 'object' || schema === null) return schema;
    const title = (schema as Json)['title'];
    if (!top && typeof title === 'string') return this.reference(schema as TSchema, title);
    const out: Json = {};
    for (const [key, value] of Object.entries(schema)) out[key] = this.#render(value, false);
    return out;
  }

  /** Every registered schema, by name. */
  all(): Json {
    return Object.fromEntries([...this.#schemas].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  }
}

const REQUEST_ID_ANSWER = { $ref: '#/components/headers/RequestId' };
const REQUEST_ID_HEADER = {
  required: true,
  description: "The request's id: the caller's X-Request-Id when it was well formed, else a generated one.",
  schema: { type: 'string' },
};

/** Headers an error status always carries besides X-Request-Id. */
const ERROR_HEADERS: Record<number, Record<string, string>> = {
  401: { 'WWW-Authenticate': 'Bearer: the scheme the API takes.' },
  405: { Allow: "The path's methods." },
  426: { Upgrade: 'websocket' },
  429: { 'Retry-After': 'Seconds to wait before trying again.' },
};

/** One answer per error status: the ErrorBody component, its `code` narrowed to the route's codes of that status. */
function errorResponses(codes: ErrorCode[], components: Components): Json {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of new Set(codes))
    byStatus.set(ERROR_STATUS[code], [...(byStatus.get(ERROR_STATUS[code]) ?? []), code]);
  const errorBody = components.reference(ErrorBody, 'ErrorBody');
  const responses: Json = {};
  for (const [status, list] of [...byStatus].sort((a, b) => a[0] - b[0]))
    responses[String(status)] = {
      description: list.join(', '),
      headers: {
        'X-Request-Id': REQUEST_ID_ANSWER,
        ...Object.fromEntries(
          Object.entries(ERROR_HEADERS[status] ?? {}).map(([name, description]) => [
            name,
            { required: true, description, schema: { type: 'string' } },
          ]),
        ),
      },
      content: {
        'application/json': { schema: { allOf: [errorBody, { properties: { code: { enum: list } } }] } },
      },
    };
  return responses;
}

/** The codes one route may answer: its own, and those every (authenticated) route may. */
export function routeErrorCodes(route: ApiRoute): ErrorCode[] {
  return [...COMMON_ERRORS, ...(route.auth === 'token' ? AUTHENTICATED_ERRORS : []), ...route.errors];
}

function parameters(route: ApiRoute, components: Components): Json[] {
  const list: Json[] = [];
  for (const match of route.path.matchAll(/:([A-Za-z_]+)/g))
    list.push({
      name: match[1],
      in: 'path',
      required: true,
      schema: { type: 'string', pattern: route.idPattern ?? ID_PATTERN },
    });
  for (const [name, parameter] of Object.entries(route.query ?? {}))
    list.push({
      name,
      in: 'query',
      required: parameter.required === true,
      description: parameter.description,
      schema: components.inline(parameter.schema),
    });
  list.push({
    name: 'X-Request-Id',
    in: 'header',
    required: false,
    description: 'Echoed on the response and in every log line of the request; generated when absent.',
    schema: { type: 'string', pattern: '^[A-Za-z0-9._:-]{1,128}$' },
  });
  return list;
}

/** A body's content: JSON as a component reference, raw bytes or text as their inline string schema. */
function content(contentType: string, schema: TSchema, name: string, components: Components): Json {
  return {
    [contentType]: {
      schema: contentType === 'application/json' ? components.reference(schema, name) : components.inline(schema),
    },
  };
}

function successResponses(route: ApiRoute, components: Components): Json {
  const responses: Json = {};
  for (const [status, answer] of Object.entries(route.responses)) {
    const headers: Json = { 'X-Request-Id': REQUEST_ID_ANSWER };
    for (const header of answer.headers ?? []) headers[header] = { required: true, schema: { type: 'string' } };
    for (const header of answer.optionalHeaders ?? [])
      headers[header] = { required: false, schema: { type: 'string' } };
    const name = `${pascal(route.operationId)}Answer${status}`;
    // A JSON schema and a content type together: an answer in either form (a listing or bytes).
    const body: Json = {
      ...(answer.schema !== undefined ? content('application/json', answer.schema, name, components) : {}),
      ...(answer.contentType !== undefined ? { [answer.contentType]: { schema: { type: 'string' } } } : {}),
    };
    responses[status] = {
      description: answer.description,
      headers,
      ...(Object.keys(body).length > 0 ? { content: body } : {}),
    };
  }
  return responses;
}

/** The messages of a WebSocket endpoint, each direction one component (a union of its message types). */
function websocketMessages(route: ApiRoute, components: Components): Json {
  const socket = route.websocket!;
  const name = pascal(route.operationId);
  return {
    messages: {
      server: components.reference(socket.server, `${name}ServerMessage`),
      ...(socket.client ? { client: components.reference(socket.client, `${name}ClientMessage`) } : {}),
    },
  };
}

function operation(route: ApiRoute, components: Components): Json {
  return {
    operationId: route.operationId,
    summary: route.summary,
    ...(route.auth === 'public' ? { security: [] } : {}),
    parameters: parameters(route, components),
    ...(route.body
      ? {
          requestBody: {
            required: route.body.optional !== true,
            content: content(
              route.body.contentType,
              route.body.schema,
              `${pascal(route.operationId)}Request`,
              components,
            ),
          },
        }
      : {}),
    responses: { ...successResponses(route, components), ...errorResponses(routeErrorCodes(route), components) },
    ...(route.websocket ? { [WEBSOCKET_EXTENSION]: websocketMessages(route, components) } : {}),
    ...(route.optional !== undefined ? { 'x-served-when': route.optional } : {}),
  };
}

/** The document of `routes` (the API's route table unless a test gives its own). */
export function buildOpenApi(version = '0.1.0', routes: readonly ApiRoute[] = ROUTES): Json {
  const components = new Components();
  const paths: Record<string, Json> = {};
  for (const route of routes) {
    const path = openApiPath(route.path);
    paths[path] = { ...(paths[path] ?? {}), [route.method]: operation(route, components) };
  }
  // Each event kind's payload schema and version; clients must ignore kinds they do not know.
  const eventKinds = Object.fromEntries(
    Object.entries(EVENT_PAYLOADS).map(([kind, definition]) => [
      kind,
      { schemaVersion: definition.schemaVersion, payload: components.inline(definition.payload) },
    ]),
  );
  return {
    openapi: '3.1.0',
    info: {
      title: 'turnhost supervisor API',
      version,
      description:
        'Loopback TCP or unix socket. Errors are { error, code } with one status per code (x-error-codes). No CORS. ' +
        `Operations carrying ${WEBSOCKET_EXTENSION} are WebSocket endpoints, not REST calls.`,
      license: { name: 'Apache-2.0', identifier: 'Apache-2.0' },
    },
    servers: [
      {
        url: DEFAULT_SERVER,
        description:
          'The default listener (listen.tcp). A server configured with listen.socket answers the same API as ' +
          'HTTP over that unix socket (clients address it as unix:/PATH; the host part of a URL is then ignored).',
      },
    ],
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      headers: { RequestId: REQUEST_ID_HEADER },
      schemas: components.all(),
    },
    'x-error-codes': ERROR_STATUS,
    'x-event-kinds': eventKinds,
  };
}

/** The committed document's text: stable key order, two-space indent, a final newline. */
export function renderOpenApi(version?: string): string {
  return `${JSON.stringify(buildOpenApi(version), null, 2)}\n`;
}
