/**
 * `turnhost run`: one turn, through the server (create + attach WebSocket) or in-process with
 * `--local` (the same turn manager and launch path as `serve`, no HTTP). Output passes through;
 * the exit code is the command's, 128+signal when signalled, or a documented refusal code.
 */
import os from 'node:os';
import { ok } from '../../core/result.js';
import { createLogger } from '../../core/log.js';
import type { ConfigOverrides } from '../config/load.js';
import { loadConfig } from '../config/load.js';
import type { TurnAttachment, TurnCreateFailure, TurnRequest, TurnResult, TurnStreamEvent } from '../turns/types.js';
import type { Attachment } from '../../client/index.js';
import { call, clientFor, type Connection } from './client.js';
import { CliExit, EXIT } from './exit-codes.js';
import { egressDenialLines } from './format.js';

const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
/** A second Ctrl-C this soon after the first cancels the turn instead of forwarding SIGINT. */
const CANCEL_WINDOW_MS = 3000;
const CTRL_C = 0x03;

/**
 * Ctrl-C reaches the command (a SIGINT forwarded, or in tty mode the byte its terminal turns
 * into one); a command that ignores it would otherwise leave the user no way out but another
 * terminal. A second press within the window cancels the turn through the server.
 */
class InterruptEscalation {
  private firstAt: number | null = null;
  private cancelling = false;

  constructor(private readonly cancel: TurnCanceller | undefined) {}

  /** One Ctrl-C; answers whether it still goes to the command. */
  press(): boolean {
    if (this.cancel === undefined || this.cancelling) return true;
    const now = Date.now();
    if (this.firstAt === null || now - this.firstAt > CANCEL_WINDOW_MS) {
      this.firstAt = now;
      process.stderr.write(`turnhost: press Ctrl-C again within ${CANCEL_WINDOW_MS / 1000} s to cancel the turn\n`);
      return true;
    }
    this.cancelling = true;
    process.stderr.write(`turnhost: cancelling turn ${this.cancel.turnId}\n`);
    this.cancel.cancel().catch((error: unknown) => {
      this.cancelling = false;
      process.stderr.write(`turnhost: cancel failed: ${error instanceof Error ? error.message : String(error)}\n`);
    });
    return false;
  }
}

/** How `run`/`attach` cancels the turn it drives: through the API, or the local turn manager. */
interface TurnCanceller {
  turnId: string;
  cancel(): Promise<unknown>;
}

function exitCodeFor(result: TurnResult): number {
  switch (result.status) {
    case 'ok':
      return EXIT.ok;
    case 'nonzero_exit':
      return result.exitCode ?? EXIT.failed;
    case 'signaled': {
      const number = result.signal === null ? undefined : os.constants.signals[result.signal as NodeJS.Signals];
      return number === undefined ? EXIT.failed : 128 + number;
    }
    case 'timeout':
      return EXIT.timeout;
    case 'cancelled':
      return EXIT.cancelled;
    case 'oom_killed':
      return 128 + os.constants.signals.SIGKILL;
    case 'launch_refused':
      return EXIT.refused;
    case 'internal_error':
    case 'interrupted':
      return EXIT.failed;
  }
}

const CREATE_FAILURE_EXIT: Record<TurnCreateFailure, number> = {
  invalid_request: EXIT.usage,
  worker_host_unsupported: EXIT.refused,
  capacity_exhausted: EXIT.capacity,
  // 503 like every refusal of the host (cli/client.ts): retry on another host.
  draining: EXIT.refused,
  conflict: EXIT.conflict,
};

/** The client's attachment seen as a TurnAttachment, so remote and local turns are driven alike. */
function remoteAttachment(attached: Attachment): TurnAttachment {
  return {
    onEvent(listener) {
      attached.onError((error) => process.stderr.write(`turnhost: attach: ${error.error}\n`));
      attached.onDropped(({ stream, bytes }) => listener({ type: 'dropped', stream, bytes }));
      void (async () => {
        for await (const chunk of attached.output) listener({ type: 'output', stream: chunk.stream, data: chunk.data });
        // The result's own type is the wire type; the daemon's is the same shape with narrower unions.
        const result = (await attached.result) as TurnResult | null;
        listener({ type: 'exit', result: result ?? LOST });
      })();
    },
    write: (data) => {
      attached.write(data);
      return ok({});
    },
    endInput: () => {
      attached.eof();
      return ok({});
    },
    resize: (cols, rows) => attached.resize(cols, rows),
    signal: (signal) => attached.signal(signal),
    pauseOutput: () => attached.pause(),
    resumeOutput: () => attached.resume(),
    detach: () => attached.close(),
  };
}

/** The attach stream ended without an exit record; runRemote then asks for the turn record. */
const LOST: TurnResult = Object.freeze({
  status: 'internal_error',
  exitCode: null,
  signal: null,
  durationMs: 0,
  usage: {
    userCpuUsec: null,
    systemCpuUsec: null,
    maxRssKiB: null,
    cgroupCpuUsec: null,
    memoryPeakBytes: null,
    pidsPeak: null,
    oomKills: null,
  },
  limitHits: [],
  detail: 'the connection to the supervisor closed before the turn ended',
  source: 'supervisor',
});

/** Passes output through (unless --json), forwards input, resizes and signals; resolves with the result. */
function drive(
  attachment: TurnAttachment,
  options: { tty: boolean; json: boolean; input?: boolean; cancel?: TurnCanceller },
): Promise<TurnResult> {
  return new Promise((resolve) => {
    const stdin = process.stdin;
    const input = options.input !== false;
    const rawMode = input && options.tty && stdin.isTTY;
    const interrupts = new InterruptEscalation(options.cancel);
    // In raw mode Ctrl-C is a byte of input for the turn's terminal, not a signal to this process.
    const onInput = (chunk: Buffer): void => {
      if (rawMode && chunk.length === 1 && chunk[0] === CTRL_C && !interrupts.press()) return;
      void attachment.write(chunk);
    };
    // The end of this process's input is the end of the command's: `cmd < /dev/null` ends at once.
    const onInputEnd = (): void => void attachment.endInput();
    const onResize = (): void => attachment.resize(process.stdout.columns, process.stdout.rows);
    const onSignal = (signal: NodeJS.Signals): void => {
      if (signal === 'SIGINT' && !interrupts.press()) return;
      attachment.signal(signal as 'SIGINT');
    };
    if (rawMode) stdin.setRawMode(true);
    if (input) {
      stdin.on('data', onInput);
      stdin.once('end', onInputEnd);
    }
    if (options.tty && process.stdout.isTTY) process.stdout.on('resize', onResize);
    for (const signal of FORWARDED_SIGNALS) process.on(signal, onSignal);

    let awaitingDrain = false;
    attachment.onEvent((event: TurnStreamEvent) => {
      if (event.type === 'output') {
        if (options.json) return;
        const target = event.stream === 'stderr' ? process.stderr : process.stdout;
        // A reader slower than the command pauses the command, never grows this process.
        if (!target.write(event.data) && !awaitingDrain) {
          awaitingDrain = true;
          attachment.pauseOutput();
          target.once('drain', () => {
            awaitingDrain = false;
            attachment.resumeOutput();
          });
        }
        return;
      }
      if (event.type === 'dropped') {
        if (!options.json)
          process.stderr.write(`turnhost: ${event.bytes} more bytes of ${event.stream} were past the retention cap\n`);
        return;
      }
      if (rawMode) stdin.setRawMode(false);
      stdin.off('data', onInput);
      stdin.off('end', onInputEnd);
      stdin.pause();
      // A file or pipe on stdin is no socket and has no unref.
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
      stdin.unref?.();
      process.stdout.off('resize', onResize);
      for (const signal of FORWARDED_SIGNALS) process.off(signal, onSignal);
      attachment.detach();
      resolve(event.result);
    });
  });
}

export interface RunOptions {
  request: TurnRequest;
  json: boolean;
}

/**
 * The exit code, and unless --json what the command's own output cannot say: why it did not
 * start, why the turn ended when the command did not end it, which egress was denied.
 */
function report(turnId: string, result: TurnResult, json: boolean): number {
  if (json) {
    process.stdout.write(JSON.stringify({ turnId, ...result }) + '\n');
    return exitCodeFor(result);
  }
  const lines: string[] = [];
  if (result.spawnError !== undefined) lines.push(result.detail ?? `command ${result.spawnError.replace('_', ' ')}`);
  else if (result.status !== 'ok' && result.status !== 'nonzero_exit')
    lines.push(`turn ${turnId}: ${result.status}${result.detail ? `: ${result.detail}` : ''}`);
  if (result.egress) lines.push(...egressDenialLines(result.egress));
  for (const line of lines) process.stderr.write(`turnhost: ${line}\n`);
  return exitCodeFor(result);
}

async function finishedResult(connection: Connection, id: string): Promise<TurnResult> {
  try {
    const record = await clientFor(connection).getTurn(id);
    return (record.result as TurnResult | null) ?? LOST;
  } catch {
    return LOST;
  }
}

/**
 * Attaches to a turn through the server and drives it to its end (output through, input and
 * its end forwarded unless `input` is false); answers the exit code as `run` does.
 */
export async function attachRemote(
  connection: Connection,
  turnId: string,
  options: { tty: boolean; json: boolean; input?: boolean },
): Promise<number> {
  const attached = await call(connection, `WebSocket /api/turns/${turnId}/attach`, (client) =>
    client.attachTurn(turnId),
  );
  const cancel = { turnId, cancel: () => clientFor(connection).cancelTurn(turnId) };
  const streamed = await drive(remoteAttachment(attached), { ...options, cancel });
  const result = streamed === LOST ? await finishedResult(connection, turnId) : streamed;
  return report(turnId, result, options.json);
}

export async function runRemote(connection: Connection, options: RunOptions): Promise<number> {
  const turn = await call(connection, 'run', (client) => client.createTurn(options.request));
  return attachRemote(connection, turn.id, { tty: options.request.tty !== undefined, json: options.json });
}

export async function runLocal(
  settings: { configPath?: string; overrides: ConfigOverrides; env: NodeJS.ProcessEnv },
  options: RunOptions,
): Promise<number> {
  const loaded = loadConfig({ configPath: settings.configPath, env: settings.env, overrides: settings.overrides });
  if (!loaded.ok) throw new CliExit(EXIT.usage, `turnhost: configuration: ${loaded.detail}`);
  // One turn and gone: a worker prepared for a next turn would only be booted to be stopped.
  const config = { ...loaded.config, turns: { ...loaded.config.turns, preparedWorkers: 0 } };
  const logger = createLogger({
    level: config.logLevel === 'info' ? 'warn' : config.logLevel,
    fields: { component: 'run-local' },
  });
  // Only `run --local` needs the supervisor's own parts; a remote run stays a thin client.
  const { createProbeContext, createProductionTurnManager, lockDataDir, openStore, prepareDataDir } =
    await import('../daemon.js');
  const dataDir = prepareDataDir(config.dataDir);
  if (!dataDir.ok) throw new CliExit(EXIT.failed, `turnhost: ${dataDir.detail}`);
  const lock = await lockDataDir(config.dataDir);
  if (!lock.ok)
    throw new CliExit(
      EXIT.failed,
      `turnhost: ${lock.detail}; use the running server (drop --local) or another --data-dir`,
    );
  const opened = openStore(config, logger);
  if (!opened.ok) {
    await lock.release();
    throw new CliExit(EXIT.failed, `turnhost: ${opened.detail}`);
  }
  const store = opened.store;
  try {
    const built = await createProductionTurnManager({
      config,
      logger,
      store,
      probeContext: createProbeContext(config, logger, settings.env),
    });
    if (!built.ok) throw new CliExit(EXIT.failed, `turnhost: turn manager unavailable: ${built.detail}`);
    try {
      const created = await built.turns.create(options.request);
      if (!created.ok)
        throw new CliExit(CREATE_FAILURE_EXIT[created.reason], `turnhost: run: ${created.detail} (${created.reason})`);
      const attached = built.turns.attach(created.turn.id);
      if (!attached.ok) throw new CliExit(EXIT.failed, `turnhost: run: ${attached.detail}`);
      const turnId = created.turn.id;
      const cancel = { turnId, cancel: () => Promise.resolve(built.turns.cancel(turnId)) };
      const result = await drive(attached.attachment, {
        tty: options.request.tty !== undefined,
        json: options.json,
        cancel,
      });
      return report(created.turn.id, result, options.json);
    } finally {
      await built.turns.close();
      built.close();
    }
  } finally {
    store.close();
    await lock.release();
  }
}
