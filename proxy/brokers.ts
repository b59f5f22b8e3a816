/**
 * The brokers of a turn: inference providers and brokered HTTP credentials, each an upstream
 * whose secret the supervisor holds and the turn never sees. A turn reaches them in plain HTTP
 * on its own egress listener, in origin form (a forward proxy only ever receives absolute-form
 * requests and CONNECT, so the two never collide): `/inference/<name>/<route>` and
 * `/credentials/<name>/<path>`. This module holds what a request is checked against (routes,
 * methods, path prefixes) and the headers that cross; broker-relay.ts moves the bytes.
 */
import { fail, ok, type Result } from '../core/result.js';
import { parseAuthority, type Authority } from './host.js';

type ProviderKind = 'anthropic' | 'openai';

/** What the relay sets after stripping what the turn sent: the provider's own credential header. */
const PROVIDER_CREDENTIAL: Record<ProviderKind, { header: string; format: string }> = {
  anthropic: { header: 'x-api-key', format: '{secret}' },
  openai: { header: 'authorization', format: 'Bearer {secret}' },
};

/** The routes a provider of each kind relays unless its configuration lists its own. */
const DEFAULT_PROVIDER_ROUTES: Record<ProviderKind, readonly string[]> = {
  anthropic: ['/v1/messages', '/v1/messages/count_tokens'],
  openai: ['/v1/chat/completions', '/v1/responses'],
};

const BROKER_METHODS: readonly string[] = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'];

/** An inference provider as the proxy takes it: the secret already read by the supervisor. */
interface InferenceProviderSpec {
  name: string;
  kind: ProviderKind;
  baseUrl: string;
  secret: string;
  /** PEM text of a CA trusted for this upstream besides the system roots. */
  ca: string | null;
  routes?: readonly string[];
}

interface BrokeredCredentialSpec {
  name: string;
  baseUrl: string;
  secret: string;
  header: string;
  /** The header value, `{secret}` replaced by the secret. */
  format: string;
  methods?: readonly string[];
  pathPrefixes?: readonly string[];
  ca: string | null;
}

export interface BrokerSpecs {
  providers: readonly InferenceProviderSpec[];
  credentials: readonly BrokeredCredentialSpec[];
  /** The largest inference request body relayed (413 above it). */
  maxRequestBytes: number;
}

/** One broker, checked and ready: where it sends, what it lets through, what it adds. */
export interface Broker {
  kind: 'inference' | 'credential';
  name: string;
  tls: boolean;
  authority: Authority;
  /** The upstream's path prefix, without a trailing slash ('' for the root). */
  basePath: string;
  /** The name `servername` TLS sends (absent for an address). */
  serverName: string | null;
  ca: string | null;
  credential: { header: string; value: string };
  methods: ReadonlySet<string>;
  /** inference: the exact paths relayed; credential: path prefixes. */
  paths: readonly string[];
  exactPaths: boolean;
  /** Bodies above this are refused (inference); null: the turn's byte cap alone. */
  maxRequestBytes: number | null;
}

export interface Brokers {
  inference: ReadonlyMap<string, Broker>;
  credential: ReadonlyMap<string, Broker>;
}

const NAME = /^[a-z][a-z0-9_]{0,31}$/;
const HEADER_NAME = /^[a-z0-9-]{1,64}$/;
/** A header value may hold no CR, LF or NUL: the secret must not be able to add a header line. */
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

function parseBase(
  where: string,
  baseUrl: string,
): Result<{ tls: boolean; authority: Authority; basePath: string; serverName: string | null }, 'invalid_options'> {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    return fail('invalid_options', `${where}.baseUrl: not a URL`);
  }
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '' || baseUrl.includes('?'))
    return fail('invalid_options', `${where}.baseUrl: no userinfo, query or fragment`);
  const tls = url.protocol === 'https:';
  if (!tls && url.protocol !== 'http:') return fail('invalid_options', `${where}.baseUrl: expected https`);
  const authority = parseAuthority(url.host, tls ? 443 : 80);
  if (!authority.ok) return fail('invalid_options', `${where}.baseUrl: ${authority.detail}`);
  const host = authority.authority.host;
  if (!tls && !(host.kind === 'ipv4' ? host.host.startsWith('127.') : ['localhost', '::1'].includes(host.host)))
    return fail('invalid_options', `${where}.baseUrl: plain http is allowed only on loopback`);
  return ok({
    tls,
    authority: authority.authority,
    basePath: url.pathname.replace(/\/+$/, ''),
    serverName: host.kind === 'name' ? host.host : null,
  });
}

function credentialHeader(
  where: string,
  header: string,
  format: string,
  secret: string,
): Result<{ credential: Broker['credential'] }, 'invalid_options'> {
  if (!HEADER_NAME.test(header)) return fail('invalid_options', `${where}.header: expected a-z, 0-9 and -`);
  if (!format.includes('{secret}')) return fail('invalid_options', `${where}.format: must contain {secret}`);
  if (secret === '') return fail('invalid_options', `${where}.secret: empty`);
  const value = format.split('{secret}').join(secret);
  // The detail never quotes the value: it holds the secret.
  if (!HEADER_VALUE.test(value)) return fail('invalid_options', `${where}.secret: holds a control character`);
  return ok({ credential: { header, value } });
}

/** Checks every broker; the detail names the entry, never a secret. */
export function compileBrokers(specs: BrokerSpecs): Result<{ brokers: Brokers }, 'invalid_options'> {
  const inference = new Map<string, Broker>();
  const credential = new Map<string, Broker>();
  for (const [i, provider] of specs.providers.entries()) {
    const where = `providers[${i}]`;
    if (!NAME.test(provider.name) || inference.has(provider.name))
      return fail('invalid_options', `${where}.name: expected a distinct name of a-z, 0-9 and _`);
    const base = parseBase(where, provider.baseUrl);
    if (!base.ok) return base;
    const own = PROVIDER_CREDENTIAL[provider.kind];
    const header = credentialHeader(where, own.header, own.format, provider.secret);
    if (!header.ok) return header;
    inference.set(provider.name, {
      kind: 'inference',
      name: provider.name,
      ...base,
      ca: provider.ca,
      credential: header.credential,
      methods: new Set(['POST']),
      paths: provider.routes ?? DEFAULT_PROVIDER_ROUTES[provider.kind],
      exactPaths: true,
      maxRequestBytes: specs.maxRequestBytes,
    });
  }
  for (const [i, entry] of specs.credentials.entries()) {
    const where = `credentials[${i}]`;
    if (!NAME.test(entry.name) || credential.has(entry.name))
      return fail('invalid_options', `${where}.name: expected a distinct name of a-z, 0-9 and _`);
    const base = parseBase(where, entry.baseUrl);
    if (!base.ok) return base;
    const header = credentialHeader(where, entry.header, entry.format, entry.secret);
    if (!header.ok) return header;
    credential.set(entry.name, {
      kind: 'credential',
      name: entry.name,
      ...base,
      ca: entry.ca,
      credential: header.credential,
      methods: new Set(entry.methods ?? BROKER_METHODS),
      paths: entry.pathPrefixes ?? ['/'],
      exactPaths: false,
      maxRequestBytes: null,
    });
  }
  return ok({ brokers: { inference, credential } });
}

export type BrokerRefusal = 'relay_method_refused' | 'relay_route_refused';

/** A request the turn sent in origin form, matched to its broker: the upstream path and query. */
export interface BrokeredRequest {
  broker: Broker;
  /** The path after `/<kind>/<name>`, as the turn sent it (no query). */
  path: string;
  /** `?…` or ''. */
  query: string;
}

const PREFIXES = { '/inference/': 'inference', '/credentials/': 'credential' } as const;

/** Whether an origin-form request target is addressed to a broker (the rest stay the forward proxy's refusals). */
export function isBrokerTarget(target: string): boolean {
  return Object.keys(PREFIXES).some((prefix) => target.startsWith(prefix));
}

/**
 * A path segment that a server may read as a step up or a separator (`..`, `.`, their percent
 * forms, an encoded slash or backslash) could leave the prefix the broker checked: refused.
 */
function unsafeSegment(path: string): boolean {
  return path
    .split('/')
    .some((segment) => /^(?:\.|%2e){1,2}$/i.test(segment) || /%2f|%5c|\\/i.test(segment) || segment.includes('\0'));
}

function pathAllowed(broker: Broker, path: string): boolean {
  if (broker.exactPaths) return broker.paths.includes(path);
  return broker.paths.some(
    (prefix) => prefix === '/' || path === prefix || path.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`),
  );
}

/** The broker and upstream path of an origin-form request, or why it is refused (403 route, 405 method). */
export function matchBrokered(
  brokers: Brokers,
  method: string,
  target: string,
): Result<{ request: BrokeredRequest }, BrokerRefusal> {
  const queryAt = target.search(/[?#]/);
  const fullPath = queryAt < 0 ? target : target.slice(0, queryAt);
  const query = queryAt < 0 ? '' : target.slice(queryAt).split('#', 1)[0]!;
  const prefix = (Object.keys(PREFIXES) as (keyof typeof PREFIXES)[]).find((p) => fullPath.startsWith(p));
  if (prefix === undefined)
    return fail('relay_route_refused', 'not a broker route (/inference/<name>/…, /credentials/<name>/…)');
  const rest = fullPath.slice(prefix.length);
  const slash = rest.indexOf('/');
  const name = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? '/' : rest.slice(slash);
  const broker = (PREFIXES[prefix] === 'inference' ? brokers.inference : brokers.credential).get(name);
  if (broker === undefined)
    return fail('relay_route_refused', `no ${PREFIXES[prefix]} broker is named "${name.slice(0, 64)}"`);
  if (!broker.methods.has(method))
    return fail(
      'relay_method_refused',
      broker.kind === 'inference'
        ? 'only inference requests (POST) are relayed'
        : `${broker.name} forwards only ${[...broker.methods].join(', ')}`,
    );
  if (unsafeSegment(path) || !pathAllowed(broker, path))
    return fail(
      'relay_route_refused',
      broker.kind === 'inference' ? 'not an authorized inference route' : `${broker.name} does not forward this path`,
    );
  return ok({ request: { broker, path, query } });
}

/**
 * Inbound headers that never reach an upstream: credentials and cookies (the broker sets its
 * own), proxy and forwarding headers (they would tell the upstream about the turn's side),
 * hop-by-hop headers and framing (the relay frames the request itself), and accept-encoding
 * (an answer comes back as it is sent, uncompressed, so a stream stays a stream).
 */
const STRIPPED_REQUEST_HEADERS = new Set([
  'authorization',
  'x-api-key',
  'api-key',
  'x-goog-api-key',
  'cookie',
  'host',
  'proxy-authorization',
  'proxy-connection',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'content-length',
  'forwarded',
  'via',
  'x-real-ip',
  'accept-encoding',
  'expect',
]);

export function brokeredRequestHeaders(
  rawHeaders: readonly string[],
  broker: Broker,
  bodyLength: number | null,
): Record<string, string | string[]> {
  const headers: Record<string, string | string[]> = {};
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (STRIPPED_REQUEST_HEADERS.has(name) || name.startsWith('x-forwarded-') || name === broker.credential.header)
      continue;
    const previous = headers[name];
    const value = rawHeaders[i + 1]!;
    headers[name] = previous === undefined ? value : [...(Array.isArray(previous) ? previous : [previous]), value];
  }
  const { host, port } = broker.authority;
  const bracketed = host.kind === 'ipv6' ? `[${host.host}]` : host.host;
  headers.host = port === (broker.tls ? 443 : 80) ? bracketed : `${bracketed}:${port}`;
  headers[broker.credential.header] = broker.credential.value;
  if (bodyLength !== null) headers['content-length'] = String(bodyLength);
  headers.connection = 'close';
  return headers;
}

const STRIPPED_RESPONSE_HEADERS = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'set-cookie',
]);

export function brokeredResponseHeaders(rawHeaders: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (!STRIPPED_RESPONSE_HEADERS.has(rawHeaders[i]!.toLowerCase())) out.push(rawHeaders[i]!, rawHeaders[i + 1]!);
  }
  return out;
}

/** The JSON body of a broker's refusal: the shape model clients already parse for API errors. */
export function refusalBody(reason: string, message: string): string {
  return `${JSON.stringify({ type: 'error', error: { type: reason, message } })}\n`;
}
