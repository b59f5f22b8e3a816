/**
 * Validation against the schemas with ajv, reporting every refused field by name:
 * `{ field, detail }` where the field is a dotted path (`tty.cols`, `argv[1]`, `env.A`) and the
 * detail the schema's `x-detail` text (see turns.ts).
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import type { TSchema } from '@sinclair/typebox';
import type { FieldError } from './errors.js';

/** Annotations the schemas carry; ajv checks no value against them. */
const ANNOTATIONS = ['x-detail', 'x-unknown', 'x-required'];

export function createAjv(): Ajv {
  const ajv = new Ajv({ allErrors: true, strict: true, strictTypes: false, validateFormats: false });
  for (const keyword of ANNOTATIONS) ajv.addKeyword({ keyword, schemaType: 'string' });
  return ajv;
}

type Node = Record<string, unknown>;

const text = (value: unknown, fallback: string): string => (typeof value === 'string' ? value : fallback);

const unescape = (s: string): string => decodeURIComponent(s.replace(/~1/g, '/').replace(/~0/g, '~'));

function fieldName(segments: string[]): string {
  if (segments.length === 0) return 'body';
  return segments.map((s, i) => (/^[0-9]+$/.test(s) ? `[${s}]` : i === 0 ? s : `.${s}`)).join('');
}

/** Finds the nearest annotated node on the way to the failing keyword, and the field it names. */
function locate(root: TSchema, error: ErrorObject): FieldError {
  const schemaSegments = error.schemaPath.replace(/^#\/?/, '').split('/').filter(Boolean).map(unescape);
  const instance = error.instancePath.split('/').slice(1).map(unescape);
  let node = root as Node;
  let depth = 0;
  let best = { node, depth };
  for (let i = 0; i < schemaSegments.length - 1; i++) {
    const segment = schemaSegments[i]!;
    let next: Node | undefined;
    if (segment === 'properties' || segment === 'patternProperties') {
      next = (node[segment] as Record<string, Node>)[schemaSegments[++i]!];
      depth++;
    } else if (segment === 'items' || segment === 'additionalProperties') {
      next = node[segment] as Node;
      depth++;
    } else if (segment === 'anyOf' || segment === 'oneOf' || segment === 'allOf') {
      next = (node[segment] as Node[])[Number(schemaSegments[++i])];
    }
    if (next === undefined) break;
    node = next;
    if (typeof node['x-detail'] === 'string') best = { node, depth };
  }
  const at = instance.slice(0, best.depth);
  if (error.keyword === 'additionalProperties' && best.depth === instance.length) {
    const name = (error.params as { additionalProperty: string }).additionalProperty;
    return { field: fieldName([...at, name]), detail: text(node['x-unknown'], 'unknown field') };
  }
  if (error.keyword === 'required' && best.depth === instance.length) {
    const name = (error.params as { missingProperty: string }).missingProperty;
    const property = (node['properties'] as Record<string, Node> | undefined)?.[name];
    const detail = text(node['x-required'], text(property?.['x-detail'], 'required'));
    return { field: fieldName([...at, name]), detail };
  }
  return { field: fieldName(at), detail: text(best.node['x-detail'], error.message ?? 'invalid') };
}

/**
 * Every refused field once, unknown fields first, then in the schema's property order; a
 * field's own refusal hides its container's (a union reports through both).
 */
function fieldErrors(schema: TSchema, errors: ErrorObject[]): FieldError[] {
  const located = errors.map((e) => ({ ...locate(schema, e), unknown: e.keyword === 'additionalProperties' }));
  const order = Object.keys((schema as Node)['properties'] ?? {});
  const rank = (f: { field: string; unknown: boolean }): number => {
    if (f.field === 'body') return -2;
    if (f.unknown && !f.field.includes('.')) return -1;
    const top = /^[^.[]+/.exec(f.field)?.[0] ?? f.field;
    const index = order.indexOf(top);
    return index < 0 ? order.length : index;
  };
  const seen = new Set<string>();
  const unique = located.filter((f) => (seen.has(f.field) ? false : (seen.add(f.field), true)));
  const specific = unique.filter(
    (f) => !unique.some((g) => g !== f && (g.field.startsWith(`${f.field}.`) || g.field.startsWith(`${f.field}[`))),
  );
  return specific
    .map((f, i) => ({ f, i }))
    .sort((a, b) => rank(a.f) - rank(b.f) || a.i - b.i)
    .map(({ f }) => ({ field: f.field, detail: f.detail }));
}

/**
 * How a refusal names what it refused, the same on HTTP and WebSocket: `error` and `field` for
 * the first refused field (what most clients read), `errors` for every one. `errors` is not empty.
 */
export function fieldRefusal(errors: FieldError[]): { error: string; field: string; errors: FieldError[] } {
  const first = errors[0]!;
  return { error: `${first.field}: ${first.detail}`, field: first.field, errors };
}

export interface SchemaValidator<T> {
  (value: unknown): { ok: true; value: T } | { ok: false; errors: FieldError[] };
}

export function compileValidator<T>(ajv: Ajv, schema: TSchema): SchemaValidator<T> {
  const validate: ValidateFunction = ajv.compile(schema);
  return (value) =>
    validate(value)
      ? { ok: true, value: value as T }
      : { ok: false, errors: fieldErrors(schema, validate.errors ?? []) };
}
