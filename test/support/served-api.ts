/**
 * The HTTP API and attach WebSocket of a served supervisor (served-supervisor.ts), raw: requests
 * whose every answer is checked against the OpenAPI document (a mismatch throws), and an attach
 * that collects what the server sends and sends anything, so tests can also send what no
 * client would. `apiRequest` serves any test that holds a connection (an in-process daemon's).
 */
import http from 'node:http';
import WebSocket from 'ws';
import { AttachServerMessage } from '../../api/schema/index.js';
import { compileValidator, createAjv } from '../../api/schema/validate.js';
import type { Connection } from '../../supervisor/cli/client.js';
import { contractProblems } from './api-contract.js';
import type { ServedSupervisor } from './served-supervisor.js';
import { until } from './until.js';

export interface ApiResponse {
  status: number;
  body: unknown;
}

/** One request; rejects, naming every mismatch, when the answer breaks the API contract. */
export function apiRequest(
  connection: Connection,
  method: string,
  urlPath: string,
  body?: unknown,
): Promise<ApiResponse> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const target = connection.target;
  const where = target.kind === 'tcp' ? { host: target.host, port: target.port } : { socketPath: target.path };
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        ...where,
        method,
        path: urlPath,
        headers: {
          authorization: `Bearer ${connection.token}`,
          ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const problems = contractProblems(method, urlPath, res.statusCode ?? 0, res.headers, text);
          if (problems.length > 0) return reject(new Error(`contract: ${problems.join('; ')}`));
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            parsed = text;
          }
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

const attachMessage = compileValidator(createAjv(), AttachServerMessage);

/**
 * The socket at once (listeners go on before it opens: a first read may carry messages), and its
 * opening. The upgrade's answer, the 101 or a refusal, is checked against the API contract.
 */
function connectSocket(connection: Connection, urlPath: string): { socket: WebSocket; opened: Promise<void> } {
  const target = connection.target;
  const url =
    target.kind === 'tcp' ? `ws://${target.host}:${target.port}${urlPath}` : `ws+unix://${target.path}:${urlPath}`;
  const socket = new WebSocket(url, { headers: { authorization: `Bearer ${connection.token}` } });
  const opened = new Promise<void>((resolve, reject) => {
    let upgraded: string[] = [];
    socket.once('upgrade', (res) => (upgraded = contractProblems('GET', urlPath, 101, res.headers, '')));
    socket.once('open', () =>
      upgraded.length > 0 ? reject(new Error(`contract: ${upgraded.join('; ')}`)) : resolve(),
    );
    socket.once('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const problems = contractProblems('GET', urlPath, res.statusCode ?? 0, res.headers, text);
        const contract = problems.length > 0 ? ` (contract: ${problems.join('; ')})` : '';
        reject(new Error(`WebSocket ${urlPath}: HTTP ${res.statusCode}${contract}`));
      });
    });
    socket.once('error', reject);
  });
  return { socket, opened };
}

/** An answer read as bytes (a raw-bytes route), its headers with it. */
interface BytesResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  data: Buffer;
}

/** One request whose answer is kept as bytes; rejects when the answer breaks the API contract. */
function apiBytes(connection: Connection, method: string, urlPath: string): Promise<BytesResponse> {
  const target = connection.target;
  const where = target.kind === 'tcp' ? { host: target.host, port: target.port } : { socketPath: target.path };
  return new Promise((resolve, reject) => {
    const req = http.request(
      { ...where, method, path: urlPath, headers: { authorization: `Bearer ${connection.token}` } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const data = Buffer.concat(chunks);
          const problems = contractProblems(method, urlPath, res.statusCode ?? 0, res.headers, data.toString('utf8'));
          if (problems.length > 0) return reject(new Error(`contract: ${problems.join('; ')}`));
          resolve({ status: res.statusCode ?? 0, headers: res.headers, data });
        });
      },
    );
    req.on('error', reject);
    req.end();
  });
}

export interface ServedApi {
  connection: Connection;
  request(method: string, urlPath: string, body?: unknown): Promise<ApiResponse>;
  /** A request whose answer is bytes (the output route). */
  bytes(method: string, urlPath: string): Promise<BytesResponse>;
  /** Creates a turn in the supervisor's workspace; `extra` adds or overrides body fields. */
  createTurn(sessionId: string, argv: string[], extra?: Record<string, unknown>): Promise<ApiResponse>;
  /** `query`: the upgrade's query string without `?` (offsets). */
  attach(turnId: string, query?: string): Promise<Attached>;
}

interface AttachMessage {
  type: string;
  stream?: string;
  data?: string;
  code?: string;
  error?: string;
  result?: { status: string; exitCode: number | null };
  bytes?: number;
}

interface Attached {
  messages: AttachMessage[];
  send(message: object): void;
  /** Everything output so far, decoded. */
  output(): string;
  /** Waits (bounded, not timed) until a message matches; answers it or undefined. */
  waitFor(match: (message: AttachMessage) => boolean, budgetMs?: number): Promise<AttachMessage | undefined>;
  close(): void;
}

export function servedApi(supervisor: ServedSupervisor): ServedApi {
  // Straight to the server: every answer is checked here, without the proxy's help.
  const connection: Connection = {
    target: { kind: 'unix', path: supervisor.serverSocket },
    token: supervisor.token,
  };
  return {
    connection,
    request: (method, urlPath, body) => apiRequest(connection, method, urlPath, body),
    bytes: (method, urlPath) => apiBytes(connection, method, urlPath),
    createTurn: (sessionId, argv, extra = {}) =>
      apiRequest(connection, 'POST', '/api/turns', {
        sessionId,
        mode: 'ordinary',
        argv,
        cwd: supervisor.workspace,
        ...extra,
      }),
    async attach(turnId, query) {
      const urlPath = `/api/turns/${encodeURIComponent(turnId)}/attach${query === undefined ? '' : `?${query}`}`;
      const { socket, opened } = connectSocket(connection, urlPath);
      const messages: AttachMessage[] = [];
      // Every message the server sends is checked against the document's AttachServerMessage.
      const violations: string[] = [];
      const conforming = (): void => {
        if (violations.length > 0) throw new Error(`contract: ${violations.join('; ')}`);
      };
      socket.on('message', (data: Buffer) => {
        const message: unknown = JSON.parse(data.toString('utf8'));
        const checked = attachMessage(message);
        if (!checked.ok) violations.push(`${data.toString('utf8').slice(0, 200)}: ${JSON.stringify(checked.errors)}`);
        messages.push(message as AttachMessage);
      });
      await opened;
      return {
        messages,
        send: (message) => socket.send(JSON.stringify(message)),
        output: () =>
          (conforming(), messages)
            .filter((m) => m.type === 'output')
            .map((m) => Buffer.from(m.data ?? '', 'base64').toString('utf8'))
            .join(''),
        async waitFor(match, budgetMs = 30_000) {
          await until(() => messages.some(match), budgetMs);
          conforming();
          return messages.find(match);
        },
        close: () => socket.close(),
      };
    },
  };
}
