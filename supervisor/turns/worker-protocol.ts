/**
 * Supervisor <-> worker protocol on the protocol fd (fd 3): newline-delimited JSON, one
 * message per line, UTF-8, lines bounded by MAX_LINE_BYTES. Both ends ship in the same build,
 * so parsing is strict in both directions: an unknown message type, an unknown field, a
 * missing or mistyped field is a protocol error naming the field, never silently ignored.
 * docs/worker-protocol.md is the prose version; the worker's side is worker/src/protocol.c, and
 * parseSupervisorMessage states the worker side's rules in TypeScript for the tests.
 */
import { fail, ok, type Result } from '../../core/result.js';

const PROTOCOL_VERSION = 1;

/** The worker's listener channel (its fd 3 is this protocol's socket; worker/src/protocol.h). */
export const LISTENER_CHANNEL_FD = 4;
/** The one message on the listener channel; the worker's egress listener rides with it. */
export const LISTENER_HANDOVER_PAYLOAD = Buffer.from('egress-listener');
/** Bounds a launch message: argv+env are capped well below the kernel's execve limit. */
export const MAX_LINE_BYTES = 1024 * 1024;
const MAX_ARGV_ENTRIES = 4096;
const MAX_ENV_ENTRIES = 4096;

/** Signals the supervisor may forward to the command's process group. */
const FORWARDABLE_SIGNALS = [
  'SIGHUP',
  'SIGINT',
  'SIGQUIT',
  'SIGTERM',
  'SIGKILL',
  'SIGUSR1',
  'SIGUSR2',
  'SIGCONT',
  'SIGSTOP',
  'SIGTSTP',
  'SIGWINCH',
] as const;
export type ForwardableSignal = (typeof FORWARDABLE_SIGNALS)[number];

interface TtySize {
  cols: number;
  rows: number;
}

export interface LaunchMessage {
  type: 'launch';
  v: 1;
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  tty: TtySize | null;
  /** True: the supervisor took the worker's egress listener and its proxy serves it; the command gets the proxy variables. */
  egress: boolean;
}
/**
 * The first message: the supervisor's compiled seccomp filter (core/seccomp/), base64 of the
 * `struct sock_filter[]` bytes. The worker checks and installs it before it reports `ready`.
 */
export interface SeccompMessage {
  type: 'seccomp';
  program: string;
}
interface ResizeMessage {
  type: 'resize';
  cols: number;
  rows: number;
}
interface SignalMessage {
  type: 'signal';
  signal: ForwardableSignal;
}
export type SupervisorMessage = SeccompMessage | LaunchMessage | ResizeMessage | SignalMessage;

interface Rusage {
  userCpuUsec: number;
  systemCpuUsec: number;
  maxRssKiB: number;
}
/**
 * The worker is booted, its fds checked, its seccomp filter installed and its egress listener
 * handed to the supervisor (fd 4, worker/src/boot.c); it waits for `launch`.
 */
interface ReadyMessage {
  type: 'ready';
}
interface StartedMessage {
  type: 'started';
  pid: number;
}
export interface ExitMessage {
  type: 'exit';
  exitCode: number | null;
  signal: string | null;
  rusage: Rusage;
  /** The command never started: 127 for not_found, 126 for not_executable, with why. */
  spawnError?: 'not_found' | 'not_executable';
  detail?: string;
}
/** Stable codes of the worker's `error` message; see docs/worker-protocol.md. */
const WORKER_ERROR_CODES = [
  'protocol_invalid',
  'protocol_closed',
  'unexpected_fds',
  'seccomp_failed',
  'egress_failed',
  'spawn_failed',
  'undumpable_failed',
] as const;
type WorkerErrorCode = (typeof WORKER_ERROR_CODES)[number];
interface ErrorMessage {
  type: 'error';
  code: WorkerErrorCode;
  detail: string;
}
export type WorkerMessage = ReadyMessage | StartedMessage | ExitMessage | ErrorMessage;

export type ParseFailure = 'invalid_json' | 'invalid_message' | 'unknown_type';

type Fields = Record<string, unknown>;
type Check<T> = Result<{ value: T }, 'invalid_message'>;

const invalid = (field: string, requirement: string): { ok: false; reason: 'invalid_message'; detail: string } =>
  fail('invalid_message', `${field}: ${requirement}`);

function isObject(value: unknown): value is Fields {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function onlyFields(message: Fields, context: string, allowed: readonly string[]): Result<{}, 'invalid_message'> {
  const extra = Object.keys(message).find((k) => !allowed.includes(k));
  return extra === undefined ? ok({}) : invalid(`${context}.${extra}`, 'unknown field');
}

function cleanString(value: unknown, field: string, maxBytes = MAX_LINE_BYTES): Check<string> {
  if (typeof value !== 'string') return invalid(field, 'must be a string');
  if (value.includes('\0')) return invalid(field, 'must not contain NUL');
  if (Buffer.byteLength(value) > maxBytes) return invalid(field, `must be at most ${maxBytes} bytes`);
  return ok({ value });
}

function intIn(value: unknown, field: string, min: number, max: number): Check<number> {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    return invalid(field, `must be an integer in ${min}..${max}`);
  }
  return ok({ value });
}

function count(value: unknown, field: string): Check<number> {
  return intIn(value, field, 0, Number.MAX_SAFE_INTEGER);
}

function nullOr<T>(value: unknown, check: (v: unknown) => Check<T>): Check<T | null> {
  return value === null ? ok({ value: null }) : check(value);
}

function ttySize(value: unknown, context: string): Check<TtySize> {
  if (!isObject(value)) return invalid(context, 'must be an object');
  const known = onlyFields(value, context, ['cols', 'rows']);
  if (!known.ok) return known;
  // struct winsize holds unsigned shorts.
  const cols = intIn(value.cols, `${context}.cols`, 1, 0xffff);
  if (!cols.ok) return cols;
  const rows = intIn(value.rows, `${context}.rows`, 1, 0xffff);
  if (!rows.ok) return rows;
  return ok({ value: { cols: cols.value, rows: rows.value } });
}

function argv(value: unknown): Check<string[]> {
  if (!Array.isArray(value) || value.length === 0 || value.length > MAX_ARGV_ENTRIES) {
    return invalid('launch.argv', `must be an array of 1..${MAX_ARGV_ENTRIES} strings`);
  }
  const out: string[] = [];
  for (const [i, arg] of value.entries()) {
    const checked = cleanString(arg, `launch.argv[${i}]`);
    if (!checked.ok) return checked;
    out.push(checked.value);
  }
  if (out[0] === '') return invalid('launch.argv[0]', 'must not be empty');
  return ok({ value: out });
}

function env(value: unknown): Check<Record<string, string>> {
  if (!isObject(value)) return invalid('launch.env', 'must be an object of strings');
  const entries = Object.entries(value);
  if (entries.length > MAX_ENV_ENTRIES) return invalid('launch.env', `must have at most ${MAX_ENV_ENTRIES} entries`);
  const out: Record<string, string> = {};
  for (const [name, v] of entries) {
    if (name === '' || name.includes('=') || name.includes('\0')) {
      return invalid(`launch.env[${JSON.stringify(name)}]`, 'name must be non-empty without "=" or NUL');
    }
    const checked = cleanString(v, `launch.env.${name}`);
    if (!checked.ok) return checked;
    out[name] = checked.value;
  }
  return ok({ value: out });
}

function absolutePath(value: unknown, field: string, maxBytes?: number): Check<string> {
  const checked = cleanString(value, field, maxBytes);
  if (!checked.ok) return checked;
  if (!checked.value.startsWith('/')) return invalid(field, 'must be an absolute path');
  return checked;
}

function launch(m: Fields): Check<LaunchMessage> {
  const known = onlyFields(m, 'launch', ['type', 'v', 'argv', 'cwd', 'env', 'tty', 'egress']);
  if (!known.ok) return known;
  if (m.v !== PROTOCOL_VERSION) return invalid('launch.v', `must be ${PROTOCOL_VERSION}`);
  const a = argv(m.argv);
  if (!a.ok) return a;
  const cwd = absolutePath(m.cwd, 'launch.cwd');
  if (!cwd.ok) return cwd;
  const e = env(m.env);
  if (!e.ok) return e;
  const tty = nullOr(m.tty, (v) => ttySize(v, 'launch.tty'));
  if (!tty.ok) return tty;
  if (typeof m.egress !== 'boolean') return invalid('launch.egress', 'must be a boolean');
  return ok({
    value: { type: 'launch', v: 1, argv: a.value, cwd: cwd.value, env: e.value, tty: tty.value, egress: m.egress },
  });
}

/** Standard base64 with padding, as Buffer.toString('base64') writes it. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

function seccomp(m: Fields): Check<SeccompMessage> {
  const known = onlyFields(m, 'seccomp', ['type', 'program']);
  if (!known.ok) return known;
  if (typeof m.program !== 'string' || !BASE64.test(m.program))
    return invalid('seccomp.program', 'must be standard base64 with padding');
  return ok({ value: { type: 'seccomp', program: m.program } });
}

function resize(m: Fields): Check<ResizeMessage> {
  const size = ttySize({ cols: m.cols, rows: m.rows }, 'resize');
  if (!size.ok) return size;
  const known = onlyFields(m, 'resize', ['type', 'cols', 'rows']);
  if (!known.ok) return known;
  return ok({ value: { type: 'resize', ...size.value } });
}

function signal(m: Fields): Check<SignalMessage> {
  const known = onlyFields(m, 'signal', ['type', 'signal']);
  if (!known.ok) return known;
  const name = FORWARDABLE_SIGNALS.find((s) => s === m.signal);
  if (name === undefined) return invalid('signal.signal', `must be one of ${FORWARDABLE_SIGNALS.join(', ')}`);
  return ok({ value: { type: 'signal', signal: name } });
}

function rusage(value: unknown): Check<Rusage> {
  if (!isObject(value)) return invalid('exit.rusage', 'must be an object');
  const known = onlyFields(value, 'exit.rusage', ['userCpuUsec', 'systemCpuUsec', 'maxRssKiB']);
  if (!known.ok) return known;
  const out: Partial<Rusage> = {};
  for (const key of ['userCpuUsec', 'systemCpuUsec', 'maxRssKiB'] as const) {
    const checked = count(value[key], `exit.rusage.${key}`);
    if (!checked.ok) return checked;
    out[key] = checked.value;
  }
  return ok({ value: out as Rusage });
}

function ready(m: Fields): Check<ReadyMessage> {
  const known = onlyFields(m, 'ready', ['type']);
  if (!known.ok) return known;
  return ok({ value: { type: 'ready' } });
}

function started(m: Fields): Check<StartedMessage> {
  const known = onlyFields(m, 'started', ['type', 'pid']);
  if (!known.ok) return known;
  const pid = intIn(m.pid, 'started.pid', 1, 0x7fffffff);
  if (!pid.ok) return pid;
  return ok({ value: { type: 'started', pid: pid.value } });
}

function exit(m: Fields): Check<ExitMessage> {
  const known = onlyFields(m, 'exit', ['type', 'exitCode', 'signal', 'rusage', 'spawnError', 'detail']);
  if (!known.ok) return known;
  const exitCode = nullOr(m.exitCode, (v) => intIn(v, 'exit.exitCode', 0, 255));
  if (!exitCode.ok) return exitCode;
  const sig = nullOr(m.signal, (v) => cleanString(v, 'exit.signal', 16));
  if (!sig.ok) return sig;
  if ((exitCode.value === null) === (sig.value === null)) {
    return invalid('exit', 'exactly one of exitCode and signal must be set');
  }
  const usage = rusage(m.rusage);
  if (!usage.ok) return usage;
  const value: ExitMessage = { type: 'exit', exitCode: exitCode.value, signal: sig.value, rusage: usage.value };
  if (m.spawnError !== undefined) {
    const spawnError = m.spawnError === 'not_found' || m.spawnError === 'not_executable' ? m.spawnError : null;
    if (spawnError === null) return invalid('exit.spawnError', "must be 'not_found' or 'not_executable'");
    const expected = spawnError === 'not_found' ? 127 : 126;
    if (exitCode.value !== expected)
      return invalid('exit.exitCode', `must be ${expected} with spawnError ${spawnError}`);
    const detail = cleanString(m.detail, 'exit.detail', 4096);
    if (!detail.ok) return detail;
    value.spawnError = spawnError;
    value.detail = detail.value;
  } else if (m.detail !== undefined) return invalid('exit.detail', 'only with spawnError');
  return ok({ value });
}

function error(m: Fields): Check<ErrorMessage> {
  const known = onlyFields(m, 'error', ['type', 'code', 'detail']);
  if (!known.ok) return known;
  const code = WORKER_ERROR_CODES.find((c) => c === m.code);
  if (code === undefined) return invalid('error.code', `must be one of ${WORKER_ERROR_CODES.join(', ')}`);
  const detail = cleanString(m.detail, 'error.detail', 4096);
  if (!detail.ok) return detail;
  return ok({ value: { type: 'error', code, detail: detail.value } });
}

function parseWith<T>(
  line: string,
  parsers: Record<string, (m: Fields) => Check<T>>,
): Result<{ message: T }, ParseFailure> {
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch (err) {
    return fail('invalid_json', `line is not JSON: ${(err as Error).message}`);
  }
  if (!isObject(raw) || typeof raw.type !== 'string')
    return invalid('type', 'message must be an object with a string type');
  const parser = Object.hasOwn(parsers, raw.type) ? parsers[raw.type] : undefined;
  if (!parser) return fail('unknown_type', `unknown message type ${JSON.stringify(raw.type).slice(0, 64)}`);
  const checked = parser(raw);
  return checked.ok ? ok({ message: checked.value }) : checked;
}

/** Worker side: one line from the supervisor. */
export function parseSupervisorMessage(line: string): Result<{ message: SupervisorMessage }, ParseFailure> {
  return parseWith<SupervisorMessage>(line, { seccomp, launch, resize, signal });
}

/** Supervisor side: one line from the worker. */
export function parseWorkerMessage(line: string): Result<{ message: WorkerMessage }, ParseFailure> {
  return parseWith<WorkerMessage>(line, { ready, started, exit, error });
}

/** One framed line; refuses a message that would exceed the line bound. */
export function encodeMessage(message: SupervisorMessage | WorkerMessage): Result<{ line: string }, 'line_too_long'> {
  const line = JSON.stringify(message) + '\n';
  if (Buffer.byteLength(line) > MAX_LINE_BYTES) {
    return fail('line_too_long', `${message.type} message exceeds ${MAX_LINE_BYTES} bytes`);
  }
  return ok({ line });
}

/**
 * Splits a byte stream into lines. Bytes are kept until a newline arrives so multi-byte UTF-8
 * sequences split across chunks decode correctly. After a failure the decoder stays failed:
 * a stream that lost its framing cannot be trusted again.
 */
export class LineDecoder {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private failure: string | undefined;

  push(chunk: Buffer): Result<{ lines: string[] }, 'line_too_long'> {
    if (this.failure !== undefined) return fail('line_too_long', this.failure);
    const lines: string[] = [];
    let rest = chunk;
    for (let nl = rest.indexOf(0x0a); nl !== -1; nl = rest.indexOf(0x0a)) {
      if (this.pendingBytes + nl + 1 > MAX_LINE_BYTES) return this.overflow();
      lines.push(Buffer.concat([...this.pending, rest.subarray(0, nl)]).toString('utf8'));
      this.pending = [];
      this.pendingBytes = 0;
      rest = rest.subarray(nl + 1);
    }
    if (this.pendingBytes + rest.length >= MAX_LINE_BYTES) return this.overflow();
    if (rest.length > 0) {
      this.pending.push(rest);
      this.pendingBytes += rest.length;
    }
    return ok({ lines });
  }

  /** Bytes received after the last newline (a peer that closes mid-line sent a torn message). */
  hasPartialLine(): boolean {
    return this.pendingBytes > 0;
  }

  private overflow(): { ok: false; reason: 'line_too_long'; detail: string } {
    this.failure = `a line exceeds ${MAX_LINE_BYTES} bytes`;
    this.pending = [];
    this.pendingBytes = 0;
    return fail('line_too_long', this.failure);
  }
}
