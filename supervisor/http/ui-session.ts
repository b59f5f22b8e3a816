/**
 * Sign-in sessions of the operator status page. The page never holds the API token: the
 * operator types it once into the sign-in form, and the supervisor answers with a random
 * session id in a cookie that scripts cannot read (`HttpOnly`) and that browsers send only with
 * requests started from this origin's own pages (`SameSite=Strict`). A session authorizes what
 * the page does and nothing more: safe methods (GET, HEAD) and the event stream's WebSocket,
 * whose upgrade must also carry an `Origin` equal to the request's own host (browsers send the
 * cookie on a WebSocket opened from another port of the same host, which is the same "site").
 * Everything that changes state keeps requiring the bearer token.
 *
 * Sessions live in memory (a restart signs everyone out), expire after SESSION_TTL_SECONDS, and
 * are looked up by the SHA-256 of the presented id.
 */
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

const SESSION_COOKIE = 'turnhost_session';
const SESSION_TTL_SECONDS = 12 * 60 * 60;
const MAX_SESSIONS = 1000;

const digest = (id: string): string => createHash('sha256').update(id, 'utf8').digest('base64url');

export class UiSessions {
  /** Session expiry (epoch milliseconds) by the digest of its id. */
  private readonly expiries = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  /** A new session id (to set as the cookie) and its lifetime. */
  create(): { id: string; maxAgeSeconds: number } {
    const id = randomBytes(32).toString('base64url');
    for (const [key, expiry] of this.expiries) if (expiry <= this.now()) this.expiries.delete(key);
    while (this.expiries.size >= MAX_SESSIONS) this.expiries.delete(this.expiries.keys().next().value as string);
    this.expiries.set(digest(id), this.now() + SESSION_TTL_SECONDS * 1000);
    return { id, maxAgeSeconds: SESSION_TTL_SECONDS };
  }

  valid(id: string | null): boolean {
    if (id === null) return false;
    const key = digest(id);
    const expiry = this.expiries.get(key);
    if (expiry === undefined) return false;
    if (expiry > this.now()) return true;
    this.expiries.delete(key);
    return false;
  }

  revoke(id: string | null): void {
    if (id !== null) this.expiries.delete(digest(id));
  }
}

export function createUiSessions(now: () => number = Date.now): UiSessions {
  return new UiSessions(now);
}

/** The session id of a `Cookie` header, or null. */
export function sessionFromCookie(headers: IncomingHttpHeaders): string | null {
  const header = headers.cookie;
  if (typeof header !== 'string') return null;
  for (const part of header.split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name === SESSION_COOKIE) {
      const id = value.join('=');
      return /^[A-Za-z0-9_-]{43}$/.test(id) ? id : null;
    }
  }
  return null;
}

export function sessionCookie(id: string, maxAgeSeconds: number): string {
  return `${SESSION_COOKIE}=${id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${maxAgeSeconds}`;
}

export function clearedSessionCookie(): string {
  return `${SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`;
}

/**
 * True when the request comes from a page of this very origin: its `Origin` names the host the
 * request was sent to. Requests without an `Origin` header are not from a browser page that
 * could carry the cookie across origins, except WebSocket upgrades, which always carry one.
 */
export function sameOrigin(headers: IncomingHttpHeaders, options: { required: boolean }): boolean {
  const origin = headers.origin;
  if (origin === undefined) return !options.required;
  const host = headers.host;
  if (typeof host !== 'string' || host === '') return false;
  return origin === `http://${host}` || origin === `https://${host}`;
}
