/**
 * `turnhost turns list|show|cancel|attach` and `turnhost session list|delete`. The calls are the
 * typed client's (through `call`, which maps a refusal to the CLI's exit); this module formats.
 */
import type { SessionDeletion, SessionList, TurnList, TurnQuery, TurnRecord } from '../../client/index.js';
import { call, type Connection } from './client.js';
import { EXIT } from './exit-codes.js';
import { attachRemote } from './run.js';

export interface TurnListQuery {
  session?: string;
  workspace?: string;
  state?: string;
  limit?: string;
}

/** The command line's words as the client's query; the server refuses bad values, naming them. */
function turnQuery(query: TurnListQuery): TurnQuery {
  const out: Record<string, string | number> = {};
  for (const [name, value] of Object.entries(query) as Array<[string, string | undefined]>)
    if (value !== undefined) out[name] = name === 'limit' && /^[0-9]+$/.test(value) ? Number(value) : value;
  return out;
}

async function fetchTurnPage(connection: Connection, query: TurnQuery): Promise<TurnList> {
  return call(connection, 'turns list', (client) => client.listTurns(query));
}

async function fetchTurn(connection: Connection, id: string): Promise<TurnRecord> {
  return call(connection, 'turns show', (client) => client.getTurn(id));
}

async function cancelTurn(connection: Connection, id: string): Promise<TurnRecord> {
  return call(connection, 'turns cancel', (client) => client.cancelTurn(id));
}

async function deleteSessionRemote(connection: Connection, id: string): Promise<SessionDeletion['deleted']> {
  return call(connection, 'session delete', (client) => client.deleteSession(id));
}

function outcome(turn: TurnRecord): string {
  if (turn.result === null) return '-';
  const { status, exitCode, signal } = turn.result;
  return exitCode !== null && status !== 'ok' ? `${status} (${exitCode})` : signal ? `${status} (${signal})` : status;
}

/** One line per turn: id, session, state, result, created. */
function formatTurnLines(turns: TurnRecord[]): string {
  return turns
    .map((turn) => [turn.id, turn.sessionId, turn.state, outcome(turn), turn.createdAt].join('  ') + '\n')
    .join('');
}

function formatTurn(turn: TurnRecord): string {
  const rows: Array<[string, string]> = [
    ['id', turn.id],
    ['session', turn.sessionId],
    ['workspace', turn.workspaceId ?? '-'],
    ['state', turn.state],
    ['mode', `${turn.mode} (${turn.profile})`],
    ['identity', `${turn.identity}${turn.workerUid === null ? '' : `, uid ${turn.workerUid}`}`],
    ['terminal', turn.tty ? 'pty' : 'pipes'],
    ['created', turn.createdAt],
    ['ended', turn.endedAt ?? '-'],
    ['result', outcome(turn)],
  ];
  if (turn.result?.detail) rows.push(['detail', turn.result.detail]);
  if (turn.result) rows.push(['duration', `${turn.result.durationMs} ms`]);
  const width = Math.max(...rows.map(([label]) => label.length));
  return rows.map(([label, value]) => `${label.padEnd(width)}  ${value}`).join('\n') + '\n';
}

export async function listTurns(
  connection: Connection,
  query: TurnListQuery,
  options: { all: boolean; json: boolean },
  print: (text: string) => void,
): Promise<number> {
  const turns: TurnRecord[] = [];
  const base = turnQuery(query);
  let page = await fetchTurnPage(connection, base);
  turns.push(...page.turns);
  while (options.all && page.nextAfter !== null) {
    page = await fetchTurnPage(connection, { ...base, after: page.nextAfter });
    turns.push(...page.turns);
  }
  if (options.json) print(JSON.stringify({ turns, nextAfter: page.nextAfter }) + '\n');
  else print(formatTurnLines(turns));
  if (!options.json && page.nextAfter !== null) process.stderr.write('more turns: --all lists every page\n');
  return EXIT.ok;
}

export async function showTurn(
  connection: Connection,
  id: string,
  json: boolean,
  print: (text: string) => void,
): Promise<number> {
  const turn = await fetchTurn(connection, id);
  print(json ? JSON.stringify(turn, null, 2) + '\n' : formatTurn(turn));
  return EXIT.ok;
}

export async function cancelTurnCommand(
  connection: Connection,
  id: string,
  json: boolean,
  print: (text: string) => void,
): Promise<number> {
  const turn = await cancelTurn(connection, id);
  print(json ? JSON.stringify(turn) + '\n' : `cancelling turn ${turn.id}\n`);
  return EXIT.ok;
}

/** Attaches as `run` does, to a turn that already exists; a pty turn gets this terminal raw. */
export async function attachTurnCommand(
  connection: Connection,
  id: string,
  options: { json: boolean; input: boolean },
): Promise<number> {
  const turn = await fetchTurn(connection, id);
  return attachRemote(connection, turn.id, { tty: turn.tty, json: options.json, input: options.input });
}

/** `turnhost session list`: one page (`--all`: every page), the most recently begun session first. */
export async function listSessionsCommand(
  connection: Connection,
  query: { limit?: string },
  options: { all: boolean; json: boolean },
  print: (text: string) => void,
): Promise<number> {
  const limit = query.limit === undefined ? undefined : /^[0-9]+$/.test(query.limit) ? Number(query.limit) : NaN;
  const fetchPage = (after?: string): Promise<SessionList> =>
    call(connection, 'session list', (client) =>
      client.listSessions({ ...(limit === undefined ? {} : { limit }), ...(after === undefined ? {} : { after }) }),
    );
  let page = await fetchPage();
  const sessions = [...page.sessions];
  while (options.all && page.nextAfter !== null) {
    page = await fetchPage(page.nextAfter);
    sessions.push(...page.sessions);
  }
  if (options.json) print(JSON.stringify({ sessions, nextAfter: page.nextAfter }) + '\n');
  else
    print(
      sessions
        .map(
          (s) =>
            `${s.id}  turns=${s.turns} workspaces=${s.workspaces} events=${s.events}  ${s.firstActivity} .. ${s.lastActivity}\n`,
        )
        .join(''),
    );
  if (!options.json && page.nextAfter !== null) process.stderr.write('more sessions: --all lists every page\n');
  return EXIT.ok;
}

export async function deleteSessionCommand(
  connection: Connection,
  id: string,
  json: boolean,
  print: (text: string) => void,
): Promise<number> {
  const deleted = await deleteSessionRemote(connection, id);
  print(
    json
      ? JSON.stringify({ deleted }) + '\n'
      : `deleted session ${deleted.sessionId}: ${deleted.events} events, ${deleted.turns} turns\n`,
  );
  return EXIT.ok;
}
