/**
 * The query parameters of every route are refused alike, as bodies are: an unknown or repeated
 * parameter and a value out of its form are each named, and a refusal lists every problem at
 * once (`errors`), the first one also as `field` and at the head of the message. Routes and the
 * WebSocket upgrades share this so a client's `TurnhostApiError.field` is set for any of them.
 */
import type { Request, Response } from 'express';
import type { FieldError } from '../../api/schema/errors.js';
import { sendError } from './errors.js';

export type QueryFailure = {
  ok: false;
  reason: 'invalid_request';
  detail: string;
  field: string;
  errors: FieldError[];
};

export class QueryCheck {
  private readonly problems: FieldError[] = [];

  /** Refuses, in the order given, each parameter not in `known` and each one given twice. */
  constructor(
    private readonly params: URLSearchParams,
    known: readonly string[],
  ) {
    for (const name of new Set(params.keys())) {
      if (!known.includes(name)) this.refuse(name, 'unknown parameter');
      else if (params.getAll(name).length > 1) this.refuse(name, 'given more than once');
    }
  }

  /** The parameter's one value; null when absent or already refused, so one name is refused once. */
  get(name: string): string | null {
    return this.refused(name) ? null : this.params.get(name);
  }

  refuse(field: string, detail: string): void {
    if (!this.refused(field)) this.problems.push({ field, detail });
  }

  refused(field: string): boolean {
    return this.problems.some((problem) => problem.field === field);
  }

  /** The refusal, or null when every parameter was accepted. */
  failure(): QueryFailure | null {
    const first = this.problems[0];
    if (first === undefined) return null;
    return {
      ok: false,
      reason: 'invalid_request',
      detail: `${first.field}: ${first.detail}`,
      field: first.field,
      errors: [...this.problems],
    };
  }
}

/** The parameters of an HTTP request (the WebSocket upgrades parse their URL themselves). */
export function requestQuery(req: Request): URLSearchParams {
  return new URL(req.originalUrl, 'http://localhost').searchParams;
}

/** The error body's extra members of a query refusal. */
export function queryRefusalBody(failure: QueryFailure): { field: string; errors: FieldError[] } {
  return { field: failure.field, errors: failure.errors };
}

export function sendQueryRefusal(res: Response, failure: QueryFailure): void {
  sendError(res, 400, failure.reason, failure.detail, queryRefusalBody(failure));
}
