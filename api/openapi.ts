/**
 * The OpenAPI 3.1 document, generated from the route table and the schemas. WebSocket endpoints
 * appear as their upgrade GET (101) with an `x-websocket` extension naming the message schemas
 * of each direction; `x-error-codes` lists every error code with its status; `x-event-kinds`
 * each governance event kind's payload schema and version.
 */
import type { TSchema } from '@sinclair/typebox';
import { ID_PATTERN } from './schema/ids.js';
import {
  ActivityView,
  AttachClientMessage,
  AttachServerMessage,
  AUTHENTICATED_ERRORS,
  COMMON_ERRORS,
  ERROR_STATUS,
  EVENT_PAYLOADS,
  ErrorBody,
  EventsPage,
  EventStreamMessage,
  FieldError,
  GovernanceEvent,
  GovernedStatus,
  Health,
  HostWriteAnswer,
  ModeAvailability,
  openApiPath,
  Ready,
  ROUTES,
  SessionDeletion,
  SystemStatus,
  TurnAnswer,
  TurnCreateRequest,
  TurnList,
  TurnRecord,
  TurnResult,
  WorkerHostStatus,
  WorkerLimitsStatus,
  Workspace,
  WorkspaceAnswer,
  WorkspaceCreateRequest,
  WorkspaceDeletion,
  WorkspaceList,
  type ApiRoute,
  type ErrorCode,
} from './schema/index.js';

/** Named schemas: each appears once under components and is referenced by `title`. */
const COMPONENTS: TSchema[] = [
  ErrorBody,
  FieldError,
  Health,
  Ready,
  SystemStatus,
  WorkerHostStatus,
  ModeAvailability,
  GovernedStatus,
  WorkerLimitsStatus,
  GovernanceEvent,
  EventsPage,
  ActivityView,
  TurnCreateRequest,
  TurnRecord,
  TurnResult,
  TurnAnswer,
  TurnList,
  HostWriteAnswer,
  EventStreamMessage,
  AttachServerMessage,
  AttachClientMessage,
  SessionDeletion,
  WorkspaceCreateRequest,
  Workspace,
  WorkspaceAnswer,
  WorkspaceList,
  WorkspaceDeletion,
];

type Json = Record<string, unknown>;
const NAMES = new Set(COMPONENTS.map((schema) => schema.title as string));

/** A plain JSON copy with every named sub-schema (other than `root` itself) replaced by a $ref. */
function withRefs(schema: unknown, root = true): unknown {
  if (Array.isArray(schema)) return schema.map((item) => withRefs(item, false));
  if (typeof schema !== 'object' || schema === null) return schema;
  const title = (schema as Json)['title'];
  if (!root && typeof title === 'string' && NAMES.has(title)) return { $ref: `#/components/schemas/${title}` };
  const out: Json = {};
  for (const [key, value] of Object.entries(schema)) out[key] = withRefs(value, false);
  return out;
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

function errorResponses(codes: ErrorCode[]): Json {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of new Set(codes))
    byStatus.set(ERROR_STATUS[code], [...(byStatus.get(ERROR_STATUS[code]) ?? []), code]);
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
        'application/json': {
          schema: {
            allOf: [{ $ref: '#/components/schemas/ErrorBody' }, { properties: { code: { enum: list } } }],
          },
        },
      },
    };
  return responses;
}

/** The codes one route may answer: its own, and those every (authenticated) route may. */
export function routeErrorCodes(route: ApiRoute): ErrorCode[] {
  return [...COMMON_ERRORS, ...(route.auth === 'token' ? AUTHENTICATED_ERRORS : []), ...route.errors];
}

function operation(route: ApiRoute): Json {
  const parameters: Json[] = [];
  for (const match of route.path.matchAll(/:([A-Za-z_]+)/g))
    parameters.push({
      name: match[1],
      in: 'path',
      required: true,
      schema: { type: 'string', pattern: route.idPattern ?? ID_PATTERN },
    });
  for (const [name, parameter] of Object.entries(route.query ?? {}))
    parameters.push({
      name,
      in: 'query',
      required: parameter.required === true,
      description: parameter.description,
      schema: withRefs(parameter.schema),
    });
  parameters.push({
    name: 'X-Request-Id',
    in: 'header',
    required: false,
    description: 'Echoed on the response and in every log line of the request; generated when absent.',
    schema: { type: 'string', pattern: '^[A-Za-z0-9._:-]{1,128}$' },
  });
  const responses: Json = {};
  for (const [status, answer] of Object.entries(route.responses)) {
    const headers: Json = { 'X-Request-Id': REQUEST_ID_ANSWER };
    for (const header of answer.headers ?? []) headers[header] = { required: true, schema: { type: 'string' } };
    for (const header of answer.optionalHeaders ?? [])
      headers[header] = { required: false, schema: { type: 'string' } };
    // A JSON schema and a content type together: an answer in either form (a listing or bytes).
    const content: Json = {
      ...(answer.schema !== undefined ? { 'application/json': { schema: withRefs(answer.schema) } } : {}),
      ...(answer.contentType !== undefined ? { [answer.contentType]: { schema: { type: 'string' } } } : {}),
    };
    responses[status] = {
      description: answer.description,
      headers,
      ...(Object.keys(content).length > 0 ? { content } : {}),
    };
  }
  Object.assign(responses, errorResponses(routeErrorCodes(route)));
  return {
    operationId: route.operationId,
    summary: route.summary,
    ...(route.auth === 'public' ? { security: [] } : {}),
    parameters,
    ...(route.body
      ? {
          requestBody: {
            required: true,
            content: { [route.body.contentType]: { schema: withRefs(route.body.schema) } },
          },
        }
      : {}),
    responses,
    ...(route.websocket
      ? {
          'x-websocket': {
            server: withRefs(route.websocket.server),
            ...(route.websocket.client ? { client: withRefs(route.websocket.client) } : {}),
          },
        }
      : {}),
    ...(route.optional !== undefined ? { 'x-served-when': route.optional } : {}),
  };
}

export function buildOpenApi(version = '0.1.0'): Json {
  const paths: Record<string, Json> = {};
  for (const route of ROUTES) {
    const path = openApiPath(route.path);
    paths[path] = { ...(paths[path] ?? {}), [route.method]: operation(route) };
  }
  const schemas: Json = {};
  for (const schema of COMPONENTS) schemas[schema.title as string] = withRefs(schema);
  return {
    openapi: '3.1.0',
    info: {
      title: 'turnhost supervisor API',
      version,
      description:
        'Loopback TCP or unix socket. Errors are { error, code } with one status per code (x-error-codes). No CORS.',
    },
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    security: [{ bearer: [] }],
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
      headers: { RequestId: REQUEST_ID_HEADER },
      schemas,
    },
    'x-error-codes': ERROR_STATUS,
    // Each event kind's payload schema and version; clients must ignore kinds they do not know.
    'x-event-kinds': Object.fromEntries(
      Object.entries(EVENT_PAYLOADS).map(([kind, definition]) => [
        kind,
        { schemaVersion: definition.schemaVersion, payload: withRefs(definition.payload) },
      ]),
    ),
  };
}

/** The committed document's text: stable key order, two-space indent, a final newline. */
export function renderOpenApi(version?: string): string {
  return `${JSON.stringify(buildOpenApi(version), null, 2)}\n`;
}
