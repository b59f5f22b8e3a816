/**
 * The contract check: an HTTP answer (status, headers, body) against the OpenAPI document. The
 * route is found by method and path template; its documented success schema, required headers
 * and error codes decide. A path outside the document (the status page) is not checked; an
 * unknown API path must answer a documented error. Answers every mismatch, empty when none.
 * WebSocket messages are checked against their route's `x-turnhost-websocket` message schemas
 * the same way.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { Ajv, type ValidateFunction } from 'ajv';
import { buildOpenApi, WEBSOCKET_EXTENSION } from '../../api/openapi.js';

type Json = Record<string, any>;

const document: Json = buildOpenApi();
const errorStatus = document['x-error-codes'] as Record<string, number>;
const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
const compiled = new Map<string, ValidateFunction>();

/** A validator of `schema` whose `#/components/...` references resolve in the document. */
function validatorFor(key: string, schema: Json): ValidateFunction {
  let validate = compiled.get(key);
  if (validate === undefined) {
    validate = ajv.compile({ ...schema, components: document['components'] });
    compiled.set(key, validate);
  }
  return validate;
}

const templates = Object.keys(document['paths'] as Json).map((template) => ({
  template,
  pattern: new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`),
}));

/** Whether a path is one the document describes (the API and /metrics, not the status page). */
export function documented(path: string): boolean {
  return path.startsWith('/api/') || path === '/metrics';
}

/** The headers a documented answer requires (resolving `#/components/headers/...`) that `headers` lacks. */
function missingHeaders(where: string, answer: Json | undefined, headers: IncomingHttpHeaders): string[] {
  const missing: string[] = [];
  for (const [name, declared] of Object.entries((answer?.['headers'] ?? {}) as Json)) {
    const ref = (declared as Json)['$ref'];
    const header = (
      typeof ref === 'string' ? document['components']['headers'][ref.split('/').pop()!] : declared
    ) as Json;
    if (header['required'] === true && headers[name.toLowerCase()] === undefined)
      missing.push(`${where}: required header ${name} missing`);
  }
  return missing;
}

export function contractProblems(
  method: string,
  url: string,
  status: number,
  headers: IncomingHttpHeaders,
  text: string,
): string[] {
  const path = url.split('?')[0] ?? url;
  if (!documented(path)) return [];
  const problems: string[] = [];
  const where = `${method} ${path} → ${status}`;
  if (typeof headers['x-request-id'] !== 'string') problems.push(`${where}: no X-Request-Id`);
  for (const name of Object.keys(headers))
    if (name.startsWith('access-control-')) problems.push(`${where}: ${name} sent (no CORS)`);
  if (method === 'HEAD') return problems;
  const matched = templates.find((t) => t.pattern.test(path));
  const operation: Json | undefined = matched
    ? (document['paths'][matched.template] as Json)[method.toLowerCase()]
    : undefined;
  const json = (): unknown => {
    try {
      return JSON.parse(text);
    } catch {
      problems.push(`${where}: body is not JSON: ${text.slice(0, 80)}`);
      return undefined;
    }
  };

  if (status >= 400) {
    const body = json() as Json | undefined;
    if (body === undefined) return problems;
    const validate = validatorFor('ErrorBody', { $ref: '#/components/schemas/ErrorBody' });
    if (!validate(body)) problems.push(`${where}: error body ${ajv.errorsText(validate.errors)}`);
    const code = String(body['code']);
    if (errorStatus[code] !== status) problems.push(`${where}: code ${code} is documented as ${errorStatus[code]}`);
    // A route's own refusals must be documented on it; unknown paths and methods answer 404/405.
    const answers = operation?.['responses']?.[String(status)];
    problems.push(...missingHeaders(where, answers, headers));
    if (operation !== undefined && status !== 404 && status !== 405) {
      const codes: string[] = answers?.content?.['application/json']?.schema?.allOf?.[1]?.properties?.code?.enum ?? [];
      if (!codes.includes(code)) problems.push(`${where}: code ${code} is not documented for this route`);
    }
    return problems;
  }

  if (operation === undefined) return [...problems, `${where}: no such operation in the document`];
  const answer: Json | undefined = operation['responses'][String(status)];
  if (answer === undefined) return [...problems, `${where}: status not documented`];
  problems.push(...missingHeaders(where, answer, headers));
  const content = (answer['content'] ?? {}) as Json;
  const schema = content['application/json']?.schema as Json | undefined;
  // An answer documented in two forms (a file's bytes or a directory's JSON listing) is checked
  // as the form its Content-Type names, and that form must be documented.
  const type = (headers['content-type'] ?? '').split(';')[0]!.trim();
  if (Object.keys(content).length > 1 && !(type in content)) problems.push(`${where}: ${type} is not documented`);
  if (schema !== undefined && (Object.keys(content).length === 1 || type === 'application/json')) {
    const body = json();
    const validate = validatorFor(`${method} ${matched!.template} ${status}`, schema);
    if (body !== undefined && !validate(body)) problems.push(`${where}: ${ajv.errorsText(validate.errors)}`);
  }
  return problems;
}

/**
 * A message the server sent on a WebSocket at `path`, against the server message schema its
 * route's `x-turnhost-websocket` names. Answers every mismatch, empty when none.
 */
export function messageProblems(path: string, text: string): string[] {
  const bare = path.split('?')[0] ?? path;
  const matched = templates.find((t) => t.pattern.test(bare));
  const schema = matched
    ? ((document['paths'][matched.template] as Json)['get']?.[WEBSOCKET_EXTENSION]?.['messages']?.['server'] as
        Json | undefined)
    : undefined;
  if (schema === undefined) return [`WebSocket ${bare}: no server messages are documented here`];
  const where = `WebSocket ${bare} message ${text.slice(0, 120)}`;
  let message: unknown;
  try {
    message = JSON.parse(text);
  } catch {
    return [`${where}: not JSON`];
  }
  const validate = validatorFor(`WebSocket ${matched!.template}`, schema);
  return validate(message) ? [] : [`${where}: ${ajv.errorsText(validate.errors)}`];
}

/** Throws naming every mismatch, so the test that received the answer fails. */
export function assertContract(
  method: string,
  url: string,
  status: number,
  headers: IncomingHttpHeaders,
  text: string,
): void {
  const problems = contractProblems(method, url, status, headers, text);
  if (problems.length > 0) throw new Error(`response breaks the API contract:\n${problems.join('\n')}`);
}
