/**
 * A small declarative schema for the configuration file: each leaf checks one value and answers
 * what it expected, so every refusal names the key path (`egress.maxConnections: expected a
 * positive integer`). Objects refuse keys they do not declare.
 */
import path from 'node:path';

/** A leaf answers null when the value is acceptable, else what was expected. */
export type Leaf = (value: unknown) => string | null;
export interface ObjectSchema {
  fields: Record<string, Schema>;
  /** Keys an earlier release read, each with why it went and what replaces it. */
  retired?: Record<string, string>;
  /** For maps with open key sets (limits): a check on the key, and one schema for every value. */
  entries?: { key: (key: string) => string | null; value: Schema };
}
export type Schema = Leaf | ObjectSchema;

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const hasNul = (value: string): boolean => value.includes('\0');

export const boolean: Leaf = (v) => (typeof v === 'boolean' ? null : 'expected true or false');
export const positiveInteger: Leaf = (v) =>
  Number.isSafeInteger(v) && (v as number) > 0 ? null : 'expected a positive integer';
export const nonNegativeInteger: Leaf = (v) =>
  Number.isSafeInteger(v) && (v as number) >= 0 ? null : 'expected a non-negative integer';
export const absolutePath: Leaf = (v) =>
  typeof v === 'string' && path.isAbsolute(v) && !hasNul(v) && path.normalize(v) === v
    ? null
    : 'expected a normalised absolute path';
export const nonEmptyString: Leaf = (v) =>
  typeof v === 'string' && v.length > 0 && v.length <= 4096 && !hasNul(v) ? null : 'expected a non-empty string';

export const oneOf =
  (...allowed: string[]): Leaf =>
  (v) =>
    typeof v === 'string' && allowed.includes(v) ? null : `expected one of ${allowed.map((a) => `'${a}'`).join(', ')}`;

export const orNull =
  (leaf: Leaf): Leaf =>
  (v) => {
    if (v === null) return null;
    const expected = leaf(v);
    return expected === null ? null : `${expected} or null`;
  };

/** Arrays check each element and name it by index (`turns.workspaceRoots[1]`). */
export function arrayOf(leaf: Leaf, options: { unique?: boolean } = {}): Leaf & { element: Leaf } {
  const check = (v: unknown): string | null => {
    if (!Array.isArray(v)) return 'expected an array';
    if (options.unique && new Set(v).size !== v.length) return 'expected distinct entries';
    return null;
  };
  return Object.assign(check, { element: leaf });
}

function isArrayLeaf(schema: Schema): schema is Leaf & { element: Leaf } {
  return typeof schema === 'function' && 'element' in schema;
}

/** Checks `value` against `schema`; answers the first problem as "<key path>: <expected>", or null. */
export function check(schema: Schema, value: unknown, keyPath: string, partial: boolean): string | null {
  return checkAll(schema, value, keyPath, partial)[0] ?? null;
}

/** Every problem of `value` against `schema`, each as "<key path>: <expected>", in key order. */
export function checkAll(schema: Schema, value: unknown, keyPath: string, partial: boolean): string[] {
  if (typeof schema === 'function') {
    const expected = schema(value);
    if (expected !== null) return [`${keyPath}: ${expected}`];
    const problems: string[] = [];
    if (isArrayLeaf(schema)) {
      for (const [i, element] of (value as unknown[]).entries()) {
        const elementExpected = schema.element(element);
        if (elementExpected !== null) problems.push(`${keyPath}[${i}]: ${elementExpected}`);
      }
    }
    return problems;
  }
  if (!isRecord(value)) return [`${keyPath || '(top level)'}: expected an object`];
  const problems: string[] = [];
  for (const [key, child] of Object.entries(value)) {
    const childPath = keyPath === '' ? key : `${keyPath}.${key}`;
    const fieldSchema = Object.hasOwn(schema.fields, key) ? schema.fields[key] : undefined;
    if (fieldSchema !== undefined) {
      problems.push(...checkAll(fieldSchema, child, childPath, partial));
    } else if (schema.entries !== undefined) {
      const keyProblem = schema.entries.key(key);
      if (keyProblem !== null) problems.push(`${childPath}: ${keyProblem}`);
      else problems.push(...checkAll(schema.entries.value, child, childPath, partial));
    } else if (schema.retired?.[key] !== undefined) {
      problems.push(`${childPath}: no longer read: ${schema.retired[key]}; remove it`);
    } else {
      problems.push(`${childPath}: unknown key`);
    }
  }
  if (!partial) {
    for (const key of Object.keys(schema.fields)) {
      if (!Object.hasOwn(value, key)) problems.push(`${keyPath === '' ? key : `${keyPath}.${key}`}: missing`);
    }
  }
  return problems;
}
