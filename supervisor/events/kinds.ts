/**
 * The registry of governance event kinds: each kind's current `schemaVersion` and a validator of
 * its payload, both from the API schema (api/schema/event-payloads.ts). Validators check that
 * every listed field is present with the right type and report every refused field; fields they
 * do not know are allowed (additive changes keep the version).
 */
import type { ErrorObject } from 'ajv';
import { EVENT_PAYLOADS } from '../../api/schema/event-payloads.js';
import { createAjv } from '../../api/schema/validate.js';
import { fail, ok, type Result } from '../../core/result.js';

export interface EventKind {
  schemaVersion: number;
  validate(payload: Record<string, unknown>): Result<{}, 'invalid_payload'>;
}

export type EventKindRegistry = ReadonlyMap<string, EventKind>;

const ajv = createAjv();

/** One refusal per field, in the order ajv found them: `payload.F is required` or `... must be X`. */
function describe(errors: ErrorObject[], properties: Record<string, { 'x-detail'?: string }>): string {
  const said = new Map<string, string>();
  for (const error of errors) {
    const missing = (error.params as { missingProperty?: string }).missingProperty;
    const name = missing ?? decodeURIComponent(error.instancePath.split('/')[1] ?? '');
    if (name === '' || said.has(name)) continue;
    said.set(
      name,
      missing !== undefined
        ? `payload.${name} is required`
        : `payload.${name} must be ${properties[name]?.['x-detail'] ?? 'valid'}`,
    );
  }
  return [...said.values()].join('; ') || 'payload: must be an object';
}

function defineKind(name: string): EventKind {
  const definition = EVENT_PAYLOADS[name]!;
  const validate = ajv.compile(definition.payload);
  const properties = definition.payload.properties as Record<string, { 'x-detail'?: string }>;
  return {
    schemaVersion: definition.schemaVersion,
    validate(payload) {
      if (validate(payload)) return ok({});
      return fail('invalid_payload', describe(validate.errors ?? [], properties));
    },
  };
}

export const EVENT_KINDS: EventKindRegistry = new Map<string, EventKind>(
  Object.keys(EVENT_PAYLOADS).map((name) => [name, defineKind(name)]),
);
