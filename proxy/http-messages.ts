/**
 * The HTTP messages the proxy writes and rewrites: refusals, the forward request's target and
 * headers going upstream, the answer's headers coming back. Hop-by-hop headers never cross.
 */
import http from 'node:http';
import { fail, ok, type Result } from '../core/result.js';
import type { DenialReason } from './events.js';
import { formatAuthority, type Authority } from './host.js';

export const CONNECT_ESTABLISHED = Buffer.from('HTTP/1.1 200 Connection Established\r\n\r\n');

const HOP_BY_HOP = new Set([
  'connection',
  'proxy-connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

export type Refusal = { reason: DenialReason; detail: string; host: string; port: number | null };

/** 403 and 400 refusals are denials (recorded, reason header); 502 is a failed dial. */
export type Refused = { status: 400 | 403; refusal: Refusal } | { status: 502; detail: string };

export function responseParts(refused: Refused): { headers: Record<string, string | number>; body: string } {
  const detail = refused.status === 502 ? refused.detail : refused.refusal.detail;
  const body = `${detail}\n`;
  const headers: Record<string, string | number> = {
    'Content-Type': 'text/plain',
    'Content-Length': Buffer.byteLength(body),
    Connection: 'close',
  };
  if (refused.status !== 502) headers['X-Turnhost-Denial'] = refused.refusal.reason;
  return { headers, body };
}

export function rawResponse(refused: Refused): string {
  const { headers, body } = responseParts(refused);
  const lines = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  return `HTTP/1.1 ${refused.status} ${http.STATUS_CODES[refused.status]}\r\n${lines}\r\n${body}`;
}

/** Splits an absolute-form `http://authority/path?query` request target. */
export function parseForwardTarget(
  url: string,
): Result<{ authorityText: string; pathAndQuery: string }, 'unsupported_scheme' | 'invalid_request'> {
  if (/^https:\/\//i.test(url))
    return fail('unsupported_scheme', 'https:// is reached through CONNECT, not as a forward request');
  if (!/^http:\/\//i.test(url)) return fail('invalid_request', 'a proxy request needs an absolute http:// URI');
  const rest = url.slice('http://'.length);
  const end = rest.search(/[/?#]/);
  const authorityText = end < 0 ? rest : rest.slice(0, end);
  const tail = end < 0 ? '/' : rest.slice(end);
  const withoutFragment = tail.split('#', 1)[0]!;
  const pathAndQuery = withoutFragment.startsWith('/') ? withoutFragment : `/${withoutFragment}`;
  return ok({ authorityText, pathAndQuery });
}

export function upstreamHeaders(rawHeaders: string[], authority: Authority): Record<string, string | string[]> {
  const connectionListed = new Set<string>();
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() === 'connection') {
      for (const token of rawHeaders[i + 1]!.split(',')) connectionListed.add(token.trim().toLowerCase());
    }
  }
  const headers: Record<string, string | string[]> = {};
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (HOP_BY_HOP.has(name) || connectionListed.has(name) || name === 'host') continue;
    const previous = headers[name];
    const value = rawHeaders[i + 1]!;
    headers[name] = previous === undefined ? value : [...(Array.isArray(previous) ? previous : [previous]), value];
  }
  headers.host = authority.port === 80 ? formatAuthority(authority).replace(/:80$/, '') : formatAuthority(authority);
  // The connection may serve later requests to this authority (upstream-pool.ts).
  headers.connection = 'keep-alive';
  return headers;
}

export function responseHeaders(rawHeaders: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (HOP_BY_HOP.has(name)) continue;
    out.push(rawHeaders[i]!, rawHeaders[i + 1]!);
  }
  return out;
}

const DIGITS = /^[0-9]{1,15}$/;

/**
 * The body length a request declares, when it is framed by one plain Content-Length and
 * nothing else; null otherwise (no body, chunked, or anything unusual: those stay with Node).
 */
export function declaredRequestLength(req: http.IncomingMessage): number | null {
  const length = req.headers['content-length'];
  if (req.headers['transfer-encoding'] !== undefined || length === undefined || !DIGITS.test(length)) return null;
  return Number(length);
}

/**
 * The body length of an answer framed by one plain Content-Length: null for an answer that
 * has no body whatever its headers say (to HEAD; 1xx, 204, 304) or is framed otherwise.
 */
export function declaredResponseLength(response: http.IncomingMessage, method: string): number | null {
  const status = response.statusCode ?? 0;
  if (method === 'HEAD' || status < 200 || status === 204 || status === 304) return null;
  const length = response.headers['content-length'];
  if (response.headers['transfer-encoding'] !== undefined || length === undefined || !DIGITS.test(length)) return null;
  return Number(length);
}
