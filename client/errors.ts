/**
 * How a call fails: one error class for every refusal and every transport failure, built from
 * the server's error body or from the socket error when no server answered.
 */
import type { ErrorCode, FieldError } from '../api/schema/index.js';

/**
 * Every failure of a call. `status` 0 with code `unreachable` when no server answered (`cause`
 * holds the socket error, `errno` its code); otherwise the HTTP status and the server's code.
 */
export class TurnhostApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode | 'unreachable' | 'protocol_error';
  readonly field?: string;
  readonly errors?: FieldError[];
  readonly requirement?: string;
  readonly errno?: string;

  constructor(
    status: number,
    code: TurnhostApiError['code'],
    message: string,
    extra: { field?: string; errors?: FieldError[]; requirement?: string; errno?: string; cause?: unknown } = {},
  ) {
    super(message, extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = 'TurnhostApiError';
    this.status = status;
    this.code = code;
    if (extra.field !== undefined) this.field = extra.field;
    if (extra.errors !== undefined) this.errors = extra.errors;
    if (extra.requirement !== undefined) this.requirement = extra.requirement;
    if (extra.errno !== undefined) this.errno = extra.errno;
  }
}

/** The server's refusal as an error; a body that is not the error shape is a protocol error. */
export function errorFromBody(status: number, body: unknown, fallback: string): TurnhostApiError {
  const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
  const code = (text(b['code']) ?? 'protocol_error') as TurnhostApiError['code'];
  const extra: { field?: string; errors?: FieldError[]; requirement?: string } = {};
  const field = text(b['field']);
  if (field !== undefined) extra.field = field;
  if (Array.isArray(b['errors'])) extra.errors = b['errors'] as FieldError[];
  const requirement = text(b['requirement']);
  if (requirement !== undefined) extra.requirement = requirement;
  return new TurnhostApiError(status, code, text(b['error']) ?? fallback, extra);
}

/** No server answered at `where` (host:port or unix:path): the socket error becomes the cause. */
export function unreachable(where: string, error: NodeJS.ErrnoException): TurnhostApiError {
  return new TurnhostApiError(0, 'unreachable', `no server answers at ${where} (${error.code ?? error.message})`, {
    ...(error.code === undefined ? {} : { errno: error.code }),
    cause: error,
  });
}
