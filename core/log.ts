/**
 * Structured logging: one JSON object per line on stderr, so journald and `jq` both read it.
 * Never log header values, query strings, bodies or environment values: callers pass fields
 * explicitly and nothing here inspects request objects.
 */
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

export type LogSink = (line: string) => void;

const stderrSink: LogSink = (line) => {
  process.stderr.write(line + '\n');
};

export function parseLogLevel(value: string): LogLevel | undefined {
  return value in RANK ? (value as LogLevel) : undefined;
}

export function createLogger(
  options: { level?: LogLevel; sink?: LogSink; fields?: Record<string, unknown> } = {},
): Logger {
  const threshold = RANK[options.level ?? 'info'];
  const sink = options.sink ?? stderrSink;
  const base = options.fields ?? {};
  const emit = (level: LogLevel, msg: string, fields?: Record<string, unknown>): void => {
    if (RANK[level] < threshold) return;
    sink(JSON.stringify({ ts: new Date().toISOString(), level, msg, ...base, ...fields }));
  };
  return {
    debug: (msg, fields) => emit('debug', msg, fields),
    info: (msg, fields) => emit('info', msg, fields),
    warn: (msg, fields) => emit('warn', msg, fields),
    error: (msg, fields) => emit('error', msg, fields),
    child: (fields) => createLogger({ level: options.level ?? 'info', sink, fields: { ...base, ...fields } }),
  };
}

/** A logger that keeps its lines in memory, for tests that assert what was (not) logged. */
export function createMemoryLogger(level: LogLevel = 'debug'): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  return { logger: createLogger({ level, sink: (l) => lines.push(l) }), lines };
}
