/**
 * Structured logging: one JSON object per line on stderr, so journald and `jq` both read it.
 * Never log header values, query strings, bodies or environment values: callers pass fields
 * explicitly and nothing here inspects request objects.
 *
 * When stderr is the journal (systemd sets JOURNAL_STREAM to the stream's device and inode),
 * each line starts with its syslog priority (`<4>` for warn), which journald strips and files
 * as the entry's PRIORITY, so `journalctl -p warning` shows warnings and errors only.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import fs from 'node:fs';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };
/** syslog priorities (RFC 5424): error 3, warning 4, informational 6, debug 7. */
const SYSLOG_PRIORITY: Record<LogLevel, number> = { debug: 7, info: 6, warn: 4, error: 3 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

/** Receives each formatted line and its level (a sink may ignore the level). */
export type LogSink = (line: string, level: LogLevel) => void;

/**
 * The threshold a logger and all its children share: a configuration reload changes the level
 * of every logger at once by setting `level`.
 */
export interface LogLevelSwitch {
  level: LogLevel;
}

/**
 * True when fd 2 is the stream systemd connected to the journal: JOURNAL_STREAM is
 * "<device>:<inode>" of that stream and must match fd 2 itself, since a child whose stderr was
 * redirected elsewhere inherits the variable too.
 */
export function stderrIsJournal(env: NodeJS.ProcessEnv = process.env, fd = 2): boolean {
  const match = /^([0-9]+):([0-9]+)$/.exec(env['JOURNAL_STREAM'] ?? '');
  if (match === null) return false;
  try {
    const stat = fs.fstatSync(fd, { bigint: true });
    return stat.dev === BigInt(match[1] ?? '') && stat.ino === BigInt(match[2] ?? '');
  } catch {
    return false;
  }
}

/** A sink writing to stderr, with the `<N>` priority prefix when stderr is the journal. */
export function createStderrSink(options: { journal?: boolean } = {}): LogSink {
  const journal = options.journal ?? stderrIsJournal();
  return journal
    ? (line, level) => process.stderr.write(`<${SYSLOG_PRIORITY[level]}>${line}\n`)
    : (line) => process.stderr.write(line + '\n');
}

export function parseLogLevel(value: string): LogLevel | undefined {
  return value in RANK ? (value as LogLevel) : undefined;
}

const contextFields = new AsyncLocalStorage<Record<string, unknown>>();

/**
 * Runs `fn` so that every line logged meanwhile, by any logger, in this call and in the work it
 * starts (awaits, timers, callbacks), carries `fields`. A request's id is one: layers far below
 * the HTTP code log under it without being handed a logger.
 */
export function withLogFields<T>(fields: Record<string, unknown>, fn: () => T): T {
  return contextFields.run({ ...contextFields.getStore(), ...fields }, fn);
}

export function createLogger(
  options: { level?: LogLevel | LogLevelSwitch; sink?: LogSink; fields?: Record<string, unknown> } = {},
): Logger {
  const threshold: LogLevelSwitch =
    typeof options.level === 'object' ? options.level : { level: options.level ?? 'info' };
  const sink = options.sink ?? createStderrSink();
  const base = options.fields ?? {};
  const emit = (level: LogLevel, msg: string, fields?: Record<string, unknown>): void => {
    if (RANK[level] < RANK[threshold.level]) return;
    const context = contextFields.getStore();
    sink(JSON.stringify({ ts: new Date().toISOString(), level, msg, ...base, ...context, ...fields }), level);
  };
  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
    child: (fields) => createLogger({ level: threshold, sink, fields: { ...base, ...fields } }),
  };
}

/** A logger that keeps its lines in memory, for tests that assert what was (not) logged. */
export function createMemoryLogger(level: LogLevel = 'debug'): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  return { logger: createLogger({ level, sink: (l) => lines.push(l) }), lines };
}
