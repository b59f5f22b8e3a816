/**
 * `turnhost turns list|show|cancel|attach` and `turnhost session delete`. The HTTP calls are
 * the functions at the top (one per route, each answering the parsed body or throwing the
 * CliExit of expectOk); the commands below only format.
 */
import type { TurnPage, TurnRecord } from '../turns/types.js';
import type { SessionDeletion } from '../turns/sessions.js';
import { apiRequest, expectOk, type Connection } from './client.js';
import { EXIT } from './exit-codes.js';
import { attachRemote } from './run.js';

const turnPath = (id: string): string => `/api/turns/${encodeURIComponent(id)}`;

export interface TurnListQuery {
  session?: string;
  workspace?: string;
  state?: string;
  limit?: string;
  after?: string;
}

export async function fetchTurnPage(connection: Connection, query: TurnListQuery): Promise<TurnPage> {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query) as Array<[string, string | undefined]>)
    if (value !== undefined) params.set(name, value);
  const text = params.toString();
  const answer = await apiRequest(connection, 'GET', `/api/turns${text === '' ? '' : `?${text}`}`);
  return expectOk(answer, 'turns list') as TurnPage;
}

export async function fetchTurn(connection: Connection, id: string): Promise<TurnRecord> {
  return (expectOk(await apiRequest(connection, 'GET', turnPath(id)), 'turns show') as { turn: TurnRecord }).turn;
}

export async function cancelTurn(connection: Connection, id: string): Promise<TurnRecord> {
  const answer = await apiRequest(connection, 'POST', `${turnPath(id)}/cancel`);
  return (expectOk(answer, 'turns cancel') as { turn: TurnRecord }).turn;
}

export async function deleteSessionRemote(connection: Connection, id: string): Promise<SessionDeletion> {
  const answer = await apiRequest(connection, 'DELETE', `/api/sessions/${encodeURIComponent(id)}`);
  return (expectOk(answer, 'session delete') as { deleted: SessionDeletion }).deleted;
}

function outcome(turn: TurnRecord): string {
  if (turn.result === null) return '-';
  const { status, exitCode, signal } = turn.result;
  return exitCode !== null && status !== 'ok' ? `${status} (${exitCode})` : signal ? `${status} (${signal})` : status;
}

/** One line per turn: id, session, state, result, created. */
export function formatTurnLines(turns: TurnRecord[]): string {
  return turns
    .map((turn) => [turn.id, turn.sessionId, turn.state, outcome(turn), turn.createdAt].join('  ') + '\n')
    .join('');
}

export function formatTurn(turn: TurnRecord): string {
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
  let page = await fetchTurnPage(connection, query);
  turns.push(...page.turns);
  while (options.all && page.nextAfter !== null) {
    page = await fetchTurnPage(connection, { ...query, after: page.nextAfter });
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
