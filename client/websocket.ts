/**
 * A WebSocket to the server (the event stream and an attach), with the headers of every call,
 * a refused handshake read as the server's error body.
 */
import WebSocket from 'ws';
import { errorFromBody, unreachable } from './errors.js';
import { parseJson, type Transport } from './transport.js';

/**
 * The socket at once, and its opening. A server may send its first messages in the same read
 * as the upgrade answer (an attach to a finished turn sends everything and closes), and ws
 * emits them right after 'open', before an awaiting caller resumes: so the caller attaches
 * its listeners to `ws` first, then awaits `opened`.
 */
export function openSocket(transport: Transport, path: string): { ws: WebSocket; opened: Promise<void> } {
  const { target } = transport;
  const url =
    target.kind === 'tcp'
      ? `ws://${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}${path}`
      : `ws+unix://${target.path}:${path}`;
  // A server that accepts the connection but never answers the handshake is a failure too.
  const ws = new WebSocket(url, {
    headers: transport.headers(),
    maxPayload: 64 * 1024 * 1024,
    handshakeTimeout: 30_000,
  });
  const opened = new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        const body = parseJson(Buffer.concat(chunks));
        reject(errorFromBody(status, body, `WebSocket ${path.split('?')[0] ?? path}: HTTP ${status}`));
      });
    });
    ws.once('error', (error: NodeJS.ErrnoException) => reject(unreachable(transport.described, error)));
  });
  return { ws, opened };
}
