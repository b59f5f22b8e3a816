/**
 * The HTTP API and attach WebSocket of a served supervisor (served-supervisor.ts), through the
 * CLI's own client functions: requests, and an attach that collects what the server sends.
 */
import fs from 'node:fs';
import path from 'node:path';
import { apiRequest, openWebSocket, type ApiResponse, type Connection } from '../../supervisor/cli/client.js';
import type { ServedSupervisor } from './served-supervisor.js';
import { until } from './until.js';

export interface ServedApi {
  connection: Connection;
  request(method: string, urlPath: string, body?: unknown): Promise<ApiResponse>;
  /** Creates a turn in the supervisor's workspace; `extra` adds or overrides body fields. */
  createTurn(sessionId: string, argv: string[], extra?: Record<string, unknown>): Promise<ApiResponse>;
  attach(turnId: string): Promise<Attached>;
}

export interface AttachMessage {
  type: string;
  stream?: string;
  data?: string;
  code?: string;
  error?: string;
  result?: { status: string; exitCode: number | null };
}

export interface Attached {
  messages: AttachMessage[];
  send(message: object): void;
  /** Everything output so far, decoded. */
  output(): string;
  /** Waits (bounded, not timed) until a message matches; answers it or undefined. */
  waitFor(match: (message: AttachMessage) => boolean, budgetMs?: number): Promise<AttachMessage | undefined>;
  close(): void;
}

export function servedApi(supervisor: ServedSupervisor): ServedApi {
  const base = path.dirname(supervisor.dataDir);
  const connection: Connection = {
    target: { kind: 'unix', path: path.join(base, 'api.sock') },
    token: fs.readFileSync(path.join(supervisor.dataDir, 'api-token'), 'utf8').trim(),
  };
  return {
    connection,
    request: (method, urlPath, body) => apiRequest(connection, method, urlPath, body),
    createTurn: (sessionId, argv, extra = {}) =>
      apiRequest(connection, 'POST', '/api/turns', {
        sessionId,
        mode: 'ordinary',
        argv,
        cwd: supervisor.workspace,
        ...extra,
      }),
    async attach(turnId) {
      const socket = await openWebSocket(connection, `/api/turns/${encodeURIComponent(turnId)}/attach`);
      const messages: AttachMessage[] = [];
      socket.onMessage((text) => messages.push(JSON.parse(text) as AttachMessage));
      return {
        messages,
        send: (message) => socket.send(JSON.stringify(message)),
        output: () =>
          messages
            .filter((m) => m.type === 'output')
            .map((m) => Buffer.from(m.data ?? '', 'base64').toString('utf8'))
            .join(''),
        async waitFor(match, budgetMs = 30_000) {
          await until(() => messages.some(match), budgetMs);
          return messages.find(match);
        },
        close: () => socket.close(),
      };
    },
  };
}
