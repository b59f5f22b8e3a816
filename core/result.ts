/**
 * Typed results: every mechanism answers a value, never a bare boolean plus a log line.
 * `reason` is a stable machine-readable code; `detail` is operator-facing text.
 */
export type Ok<T extends object = {}> = { ok: true } & T;
export type Fail<R extends string = string> = { ok: false; reason: R; detail: string };
export type Result<T extends object = {}, R extends string = string> = Ok<T> | Fail<R>;

export function ok<T extends object>(value: T): Ok<T> {
  return { ok: true, ...value };
}

export function fail<R extends string>(reason: R, detail: string): Fail<R> {
  return { ok: false, reason, detail };
}

/** An error that carries a stable `code`, for the places where throwing is the right shape. */
export class CodedError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = 'CodedError';
  }
}
