/**
 * The `turnhost` command line: `serve` runs the supervisor; `status`, `check`, `drain`, `events`, `run`,
 * `turns` and `session` talk to a running one (or `run --local` runs one turn in-process). Exit codes: cli/exit-codes.ts
 * and docs/cli.md.
 */
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { ConfigOverrides } from '../config/load.js';
import type { EventsPage as EventPage, GovernanceEvent, WorkerHostStatus } from '../../api/schema/index.js';
import type { TurnRequest } from '../turns/types.js';
import { call, cliFailure, clientFor, resolveConnection, type Connection } from './client.js';
import { CliExit, EXIT } from './exit-codes.js';
import { formatAttestation, formatCapacity, formatEvent, formatStatus, formatWorkerHost } from './format.js';
import { COMMAND_HELP, USAGE } from './help.js';
import { bashCompletion } from './completion.js';
import { runLocal, runRemote } from './run.js';
import { WORKSPACE_ACTIONS, workspaceCommand } from './workspace.js';
import {
  attachTurnCommand,
  cancelTurnCommand,
  deleteSessionCommand,
  listSessionsCommand,
  listTurns,
  showTurn,
} from './turn-commands.js';
import { workspaceFilesCommand } from './workspace-files.js';
import { EVENT_KINDS } from '../events/kinds.js';
import { softwareIdentity } from '../software.js';

type Options = ParseArgsConfig['options'];
const CONFIG_OPTIONS: Options = {
  config: { type: 'string' },
  'data-dir': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
};
const CLIENT_OPTIONS: Options = { ...CONFIG_OPTIONS, server: { type: 'string' }, json: { type: 'boolean' } };

const COMMAND_OPTIONS: Record<string, Options> = {
  serve: { ...CONFIG_OPTIONS, listen: { type: 'string' }, socket: { type: 'string' }, 'log-level': { type: 'string' } },
  status: CLIENT_OPTIONS,
  check: { ...CLIENT_OPTIONS, attack: { type: 'boolean' } },
  drain: { ...CLIENT_OPTIONS, off: { type: 'boolean' } },
  events: {
    ...CLIENT_OPTIONS,
    session: { type: 'string' },
    turn: { type: 'string' },
    kind: { type: 'string' },
    after: { type: 'string' },
    before: { type: 'string' },
    desc: { type: 'boolean' },
    limit: { type: 'string' },
    follow: { type: 'boolean', short: 'f' },
  },
  run: {
    ...CLIENT_OPTIONS,
    mode: { type: 'string' },
    tty: { type: 'boolean' },
    timeout: { type: 'string' },
    cwd: { type: 'string' },
    env: { type: 'string', multiple: true },
    allow: { type: 'string', multiple: true },
    limit: { type: 'string', multiple: true },
    session: { type: 'string' },
    'turn-id': { type: 'string' },
    workspace: { type: 'string' },
    local: { type: 'boolean' },
  },
  workspace: {
    ...CLIENT_OPTIONS,
    session: { type: 'string' },
    cancel: { type: 'boolean' },
    recursive: { type: 'boolean' },
  },
  completion: { help: { type: 'boolean', short: 'h' } },
};

/** Commands with subcommands (`turnhost turns list`): each subcommand's options; the ID is positional. */
const SUBCOMMAND_OPTIONS: Record<string, Record<string, Options>> = {
  turns: {
    list: {
      ...CLIENT_OPTIONS,
      session: { type: 'string' },
      workspace: { type: 'string' },
      state: { type: 'string' },
      limit: { type: 'string' },
      all: { type: 'boolean' },
    },
    show: CLIENT_OPTIONS,
    cancel: CLIENT_OPTIONS,
    attach: { ...CLIENT_OPTIONS, 'no-input': { type: 'boolean' } },
  },
  session: { list: { ...CLIENT_OPTIONS, limit: { type: 'string' }, all: { type: 'boolean' } }, delete: CLIENT_OPTIONS },
};

/** `turnhost completion`: every command's long options, and the values an option takes. */
export function completionScript(): string {
  const commands = Object.fromEntries(
    Object.entries(COMMAND_OPTIONS).map(([command, options]) => [
      command,
      Object.keys(options ?? {})
        .filter((name) => name !== 'help')
        .map((name) => `--${name}`),
    ]),
  );
  const optionNames = (options: Options): string[] =>
    Object.keys(options ?? {})
      .filter((name) => name !== 'help')
      .map((name) => `--${name}`);
  const subcommands = Object.fromEntries(
    Object.entries(SUBCOMMAND_OPTIONS).map(([command, subs]) => [
      command,
      Object.fromEntries(Object.entries(subs).map(([sub, options]) => [sub, optionNames(options)])),
    ]),
  );
  return bashCompletion({
    commands,
    subcommands,
    values: {
      '--state': ['starting', 'running', 'finished'],
      '--mode': ['ordinary', 'restricted'],
      '--log-level': ['debug', 'info', 'warn', 'error'],
      '--kind': [...EVENT_KINDS.keys()],
      // The word after `workspace` is its action.
      workspace: [...WORKSPACE_ACTIONS, 'files'],
    },
  });
}

type Values = Record<string, string | boolean | string[] | undefined>;

function usage(message: string, command?: string): CliExit {
  const help = command === undefined ? undefined : COMMAND_HELP[command];
  return new CliExit(EXIT.usage, `turnhost: ${message}\n${help ?? USAGE}`);
}

function str(values: Values, name: string): string | undefined {
  const value = values[name];
  return typeof value === 'string' ? value : undefined;
}

function list(values: Values, name: string): string[] {
  const value = values[name];
  return Array.isArray(value) ? value : [];
}

function configOverrides(values: Values): ConfigOverrides {
  const overrides: ConfigOverrides = {};
  const dataDir = str(values, 'data-dir');
  if (dataDir !== undefined) overrides.dataDir = dataDir;
  return overrides;
}

function connect(values: Values, env: NodeJS.ProcessEnv): Connection {
  return resolveConnection({
    server: str(values, 'server'),
    configPath: str(values, 'config'),
    overrides: configOverrides(values),
    env,
  });
}

function print(text: string): void {
  process.stdout.write(text);
}

async function serve(values: Values, env: NodeJS.ProcessEnv): Promise<number> {
  const overrides = configOverrides(values);
  const listen = str(values, 'listen');
  const socket = str(values, 'socket');
  const logLevel = str(values, 'log-level');
  if (listen !== undefined) overrides.listen = listen === 'none' ? null : listen;
  if (socket !== undefined) overrides.socket = socket === 'none' ? null : socket;
  if (logLevel !== undefined) overrides.logLevel = logLevel;
  // The daemon (express, SQLite, systeminformation) loads only for `serve`: client commands stay quick.
  const { startDaemon } = await import('../daemon.js');
  const started = await startDaemon({ configPath: str(values, 'config'), env, overrides });
  if (!started.ok) {
    const code = started.reason === 'config_invalid' ? EXIT.usage : EXIT.failed;
    throw new CliExit(code, `turnhost serve: ${started.reason}: ${started.detail}`);
  }
  const { daemon } = started;
  await new Promise<void>((resolve) => {
    // SIGHUP (systemctl reload) re-reads the configuration; without this handler Node's default
    // action for SIGHUP ends the process at once, leaving the socket file and the turns behind.
    const reload = (): void => void daemon.reload();
    // SIGUSR2 starts drain mode (a new turn gets 503 draining); `turnhost drain --off` ends it.
    const drain = (): void => void daemon.drain(true);
    const stop = (): void => {
      process.off('SIGHUP', reload);
      process.off('SIGUSR2', drain);
      void daemon.close().then(resolve);
    };
    process.on('SIGHUP', reload);
    process.on('SIGUSR2', drain);
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  return EXIT.ok;
}

async function status(values: Values, env: NodeJS.ProcessEnv): Promise<number> {
  const body = await call(connect(values, env), 'status', (client) => client.status());
  print(
    values['json'] ? JSON.stringify(body, null, 2) + '\n' : formatStatus(body as Parameters<typeof formatStatus>[0]),
  );
  return EXIT.ok;
}

async function check(values: Values, env: NodeJS.ProcessEnv): Promise<number> {
  const connection = connect(values, env);
  const attack = values['attack'] === true;
  const body: WorkerHostStatus = await call(connection, 'check', (client) =>
    client.checkWorkerHost(attack ? { attack } : {}),
  );
  // Drain is the operator's choice, not a fault: reported, never an exit code of its own.
  const capacity = (await call(connection, 'check', (client) => client.status())).runtime.capacity;
  const text =
    formatWorkerHost(body) +
    (attack ? formatAttestation(body.attested) : '') +
    (capacity === undefined ? '' : formatCapacity(capacity));
  print(values['json'] ? JSON.stringify(capacity === undefined ? body : { ...body, capacity }, null, 2) + '\n' : text);
  // Configured workspaces that cannot run a turn are as unusable as the mode itself.
  const usable = body.ordinary?.available === true && body.workspaceTurns?.available !== false;
  return usable ? EXIT.ok : EXIT.unavailable;
}

/** `turnhost drain [--off]`: drain mode on (new turns refused) or off, through POST /api/drain. */
async function drain(values: Values, env: NodeJS.ProcessEnv): Promise<number> {
  const draining = values['off'] !== true;
  const answer = await call(connect(values, env), 'drain', (client) => client.drain({ draining }));
  if (values['json']) print(JSON.stringify(answer, null, 2) + '\n');
  else {
    const was = answer.changed ? '' : ' (already)';
    print(
      (draining
        ? `draining${was}: new turns are refused; running turns end as they would\n`
        : `not draining${was}: new turns are taken\n`) + formatCapacity(answer.capacity),
    );
  }
  return EXIT.ok;
}

/** The event filters given as flags; `after` and `limit` go as typed (the server validates them). */
function eventQuery(values: Values, names: string[]): Record<string, string> {
  const query: Record<string, string> = {};
  for (const name of names) {
    const value = str(values, name);
    if (value !== undefined) query[name] = value;
  }
  return query;
}

async function events(values: Values, env: NodeJS.ProcessEnv): Promise<number> {
  const connection = connect(values, env);
  const json = values['json'] === true;
  const show = (event: GovernanceEvent): void => print(json ? JSON.stringify(event) + '\n' : formatEvent(event));
  if (!values['follow']) {
    const { after, before, limit, ...filters } = eventQuery(values, [
      'session',
      'turn',
      'kind',
      'after',
      'before',
      'limit',
    ]);
    const desc = values['desc'] === true;
    // The server refuses a cursor of the other order, naming it.
    const page: EventPage = await call(connection, 'events', (client) =>
      client.events({
        ...filters,
        ...(desc ? { order: 'desc' as const } : {}),
        ...(after === undefined ? {} : { after: Number(after) }),
        ...(before === undefined ? {} : { before: Number(before) }),
        ...(limit === undefined ? {} : { limit: Number(limit) }),
      }),
    );
    if (json) print(JSON.stringify(page) + '\n');
    else page.events.forEach(show);
    if (!json && page.nextAfter !== null) process.stderr.write(`more events: --after ${page.nextAfter}\n`);
    if (!json && page.nextBefore !== null) process.stderr.write(`more events: --desc --before ${page.nextBefore}\n`);
    return EXIT.ok;
  }
  if (values['limit'] !== undefined) throw usage('--limit does not apply to --follow', 'events');
  if (values['desc'] === true || values['before'] !== undefined)
    throw usage('--desc and --before do not apply to --follow', 'events');
  const { after, ...filters } = eventQuery(values, ['session', 'turn', 'kind', 'after']);
  const abort = new AbortController();
  const stop = (): void => abort.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    const stream = clientFor(connection).streamEvents({
      ...filters,
      ...(after === undefined ? {} : { after: Number(after) }),
      signal: abort.signal,
    });
    for await (const event of stream) show(event);
    return EXIT.ok;
  } catch (error) {
    throw cliFailure(connection, error, 'events');
  } finally {
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }
}

function keyValues(entries: string[], flag: string): Array<[string, string]> {
  return entries.map((entry) => {
    const at = entry.indexOf('=');
    if (at <= 0) throw usage(`${flag} ${entry}: expected NAME=VALUE`, 'run');
    return [entry.slice(0, at), entry.slice(at + 1)];
  });
}

export function buildTurnRequest(values: Values, argv: string[], cwd: string): TurnRequest {
  if (argv.length === 0) throw usage('run: missing the command (turnhost run [options] -- CMD ARGS...)', 'run');
  const mode = str(values, 'mode') ?? 'ordinary';
  if (mode !== 'ordinary' && mode !== 'restricted')
    throw usage(`--mode: expected ordinary or restricted, not ${mode}`, 'run');
  const workspace = str(values, 'workspace');
  const request: TurnRequest = {
    sessionId: str(values, 'session') ?? `cli-${randomBytes(6).toString('hex')}`,
    mode,
    argv,
    // The server knows nothing of this shell's directory: a relative --cwd is resolved here.
    // In a workspace, --cwd is relative to the workspace (default its top).
    cwd: workspace === undefined ? path.resolve(cwd, str(values, 'cwd') ?? '.') : (str(values, 'cwd') ?? '.'),
  };
  if (workspace !== undefined) request.workspace = workspace;
  const turnId = str(values, 'turn-id');
  if (turnId !== undefined) request.turnId = turnId;
  const timeout = str(values, 'timeout');
  if (timeout !== undefined) {
    if (!/^[0-9]+(\.[0-9]+)?$/.test(timeout) || Number(timeout) <= 0)
      throw usage('--timeout: expected a positive number of seconds', 'run');
    request.timeoutSeconds = Number(timeout);
  }
  const env = keyValues(list(values, 'env'), '--env');
  if (env.length > 0) request.env = Object.fromEntries(env);
  const allow = list(values, 'allow');
  if (allow.length > 0) request.egressAllow = allow;
  const limits = keyValues(list(values, 'limit'), '--limit');
  if (limits.length > 0)
    request.limits = Object.fromEntries(
      limits.map(([name, value]) => [name, /^[0-9]+(\.[0-9]+)?$/.test(value) ? Number(value) : value]),
    );
  if (values['tty']) request.tty = { cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 };
  return request;
}

async function run(values: Values, positionals: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const request = buildTurnRequest(values, positionals, process.cwd());
  const options = { request, json: values['json'] === true };
  if (values['local']) {
    if (values['server'] !== undefined) throw usage('--local and --server exclude each other', 'run');
    return runLocal({ configPath: str(values, 'config'), overrides: configOverrides(values), env }, options);
  }
  return runRemote(connect(values, env), options);
}

/** `turnhost turns ...` and `turnhost session ...`: the subcommand, its options, its one ID. */
async function subcommand(command: string, rest: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const [sub, ...args] = rest;
  const table = SUBCOMMAND_OPTIONS[command] ?? {};
  if (sub === undefined || sub === '--help' || sub === '-h') {
    print(COMMAND_HELP[command] ?? USAGE);
    return sub === undefined ? EXIT.usage : EXIT.ok;
  }
  const options = table[sub];
  const name = `${command} ${sub}`;
  if (options === undefined) throw usage(`unknown ${command} command '${sub}'`, command);
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({ args, options, allowPositionals: true, strict: true }) as typeof parsed;
  } catch (error) {
    throw usage((error as Error).message, name);
  }
  const { values, positionals } = parsed;
  if (values['help']) {
    print(COMMAND_HELP[name] ?? USAGE);
    return EXIT.ok;
  }
  const json = values['json'] === true;
  if (name === 'session list') {
    if (positionals.length > 0) throw usage(`${name}: unexpected argument '${positionals[0]}'`, name);
    return listSessionsCommand(
      connect(values, env),
      { limit: str(values, 'limit') },
      { all: values['all'] === true, json },
      print,
    );
  }
  if (sub === 'list') {
    if (positionals.length > 0) throw usage(`${name}: unexpected argument '${positionals[0]}'`, name);
    return listTurns(
      connect(values, env),
      {
        session: str(values, 'session'),
        workspace: str(values, 'workspace'),
        state: str(values, 'state'),
        limit: str(values, 'limit'),
      },
      { all: values['all'] === true, json },
      print,
    );
  }
  const [id] = positionals;
  if (id === undefined || positionals.length > 1 || id === '') throw usage(`${name}: expected one ID`, name);
  const connection = connect(values, env);
  switch (name) {
    case 'turns show':
      return showTurn(connection, id, json, print);
    case 'turns cancel':
      return cancelTurnCommand(connection, id, json, print);
    case 'turns attach':
      return attachTurnCommand(connection, id, { json, input: values['no-input'] !== true });
    default:
      return deleteSessionCommand(connection, id, json, print);
  }
}

export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === 'help' || command === '--help' || command === '-h') {
    const subtopic = rest[1] === undefined ? undefined : `${rest[0]} ${rest[1]}`;
    const topic =
      command !== 'help' ? undefined : subtopic !== undefined && COMMAND_HELP[subtopic] ? subtopic : rest[0];
    print(topic !== undefined && COMMAND_HELP[topic] !== undefined ? COMMAND_HELP[topic] : USAGE);
    return command === undefined ? EXIT.usage : EXIT.ok;
  }
  if (command === '--version' || command === '-V') {
    const software = softwareIdentity();
    print(`turnhost ${software.release} (commit ${software.sourceCommit})\n`);
    return EXIT.ok;
  }
  if (SUBCOMMAND_OPTIONS[command] !== undefined) return subcommand(command, rest, env);
  const options = COMMAND_OPTIONS[command];
  if (options === undefined) throw usage(`unknown command '${command}'`);
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({
      args: rest,
      options,
      allowPositionals: command === 'run' || command === 'workspace',
      strict: true,
    }) as typeof parsed;
  } catch (error) {
    throw usage((error as Error).message, command);
  }
  if (parsed.values['help']) {
    print(COMMAND_HELP[command] ?? USAGE);
    return EXIT.ok;
  }
  switch (command) {
    case 'completion':
      print(completionScript());
      return EXIT.ok;
    case 'serve':
      return serve(parsed.values, env);
    case 'status':
      return status(parsed.values, env);
    case 'check':
      return check(parsed.values, env);
    case 'drain':
      return drain(parsed.values, env);
    case 'events':
      return events(parsed.values, env);
    case 'workspace': {
      if (parsed.positionals[0] === 'files') return workspaceFiles(parsed.positionals.slice(1), parsed.values, env);
      const [action, id, ...extra] = parsed.positionals;
      if (extra.length > 0) throw usage(`workspace: unexpected ${extra.join(' ')}`, 'workspace');
      return workspaceCommand(
        () => connect(parsed.values, env),
        {
          action,
          id,
          session: str(parsed.values, 'session'),
          cancel: parsed.values['cancel'] === true,
          json: parsed.values['json'] === true,
        },
        (message) => usage(message, 'workspace'),
        print,
      );
    }
    default:
      return run(parsed.values, parsed.positionals, env);
  }
}

/** `turnhost workspace files ACTION ID [PATH] [LOCAL]`. */
function workspaceFiles(positionals: string[], values: Values, env: NodeJS.ProcessEnv): Promise<number> {
  const [action, id, remote, local, ...extra] = positionals;
  if (extra.length > 0) throw usage(`workspace files: unexpected ${extra.join(' ')}`, 'workspace');
  return workspaceFilesCommand(
    () => connect(values, env),
    { action, id, remote, local, recursive: values['recursive'] === true, json: values['json'] === true },
    (message) => usage(message, 'workspace'),
    { print, writeBytes: (data) => process.stdout.write(data), readInput: () => fs.readFileSync(0) },
  );
}

/** Runs the CLI and sets the process exit code; `bin/turnhost` and `node dist/supervisor/cli/main.js` both call it. */
export function runCli(argv: string[]): void {
  main(argv).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      if (error instanceof CliExit) {
        process.stderr.write(error.message.endsWith('\n') ? error.message : error.message + '\n');
        process.exitCode = error.code;
      } else {
        process.stderr.write(`turnhost: ${(error as Error).stack ?? String(error)}\n`);
        process.exitCode = EXIT.failed;
      }
    },
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) runCli(process.argv.slice(2));
