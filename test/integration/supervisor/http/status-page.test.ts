/**
 * The status page's HTTP side: pages with their CSP, token sign-in into an HttpOnly,
 * SameSite=Strict session cookie, what a session may and may not do, the event stream's origin
 * check, /api/activity and /metrics behind authentication. The browser test
 * (status-page-browser.test.ts) drives the page itself.
 */
import path from 'node:path';
import t from 'tap';
import WebSocket from 'ws';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { createActivity } from '../../../../supervisor/observe/activity.js';
import { createMetrics } from '../../../../supervisor/observe/metrics.js';
import { createUiSessions } from '../../../../supervisor/http/ui-session.js';
import { event, nextMessages, opened, startTestServer, TOKEN, upgradeRefusal } from '../../../support/app-server.js';

const UI_DIR = path.resolve(import.meta.dirname, '../../../../ui');

async function server(tokenFile: string | null = '/srv/turnhost-data/api-token') {
  return startTestServer({
    deps: (store, config) => {
      const activity = createActivity(store);
      return {
        activity,
        metrics: createMetrics({ config, store, activity, latestStatus: () => null }),
        statusPage: { uiDir: UI_DIR, sessions: createUiSessions(), tokenFile },
      };
    },
  });
}

/**
 * A sample value as Prometheus reads it (Go's ParseFloat: decimal or exponent notation, and
 * Inf/NaN in any case; prom-client prints `Nan` for the event-loop statistics before their first
 * sample).
 */
const FLOAT = /^([+-]?([0-9]+\.?[0-9]*|\.[0-9]+)(e[+-]?[0-9]+)?|[+-]?inf|nan)$/i;

function cookieOf(setCookie: string | string[] | undefined): string {
  const header = Array.isArray(setCookie) ? setCookie[0] : setCookie;
  return (header ?? '').split(';')[0] ?? '';
}

t.test('pages are public, carry the CSP, and hold no data', async (t) => {
  const s = await server();
  t.teardown(() => s.close());
  const root = await s.request('GET', '/', { token: null });
  t.equal(root.status, 302);
  t.equal(root.headers.location, '/ui/');
  for (const page of ['/ui/', '/ui/login', '/ui/app.js', '/ui/app.css', '/ui/login.js']) {
    const res = await s.request('GET', page, { token: null });
    t.equal(res.status, 200, page);
    t.match(res.headers['content-security-policy'], /^default-src 'self'(;|$)/, `${page}: CSP default-src 'self'`);
    t.match(res.headers['content-security-policy'], /frame-ancestors 'none'/);
    t.equal(res.headers['x-content-type-options'], 'nosniff');
    t.notMatch(res.text, new RegExp(TOKEN), 'no token in a page');
  }
  t.notMatch((await s.request('GET', '/ui/', { token: null })).text, /<script>|style=/, 'no inline script or style');
  t.equal((await s.request('GET', '/api/status', { token: null })).status, 401, 'data still needs authentication');
});

t.test("the sign-in form names this server's token file, or its configuration", async (t) => {
  const s = await server('/srv/turnhost-data/api-token');
  t.teardown(() => s.close());
  const login = (await s.request('GET', '/ui/login', { token: null })).text;
  t.match(login, '<code id="token-file">/srv/turnhost-data/api-token</code>');
  t.notMatch(login, '/var/lib/turnhost/api-token', 'not the packaged path');
  const odd = await server('/srv/<b>&"data/api-token');
  t.teardown(() => odd.close());
  t.match((await odd.request('GET', '/ui/login', { token: null })).text, '/srv/&#60;b&#62;&#38;&#34;data/api-token');
  const configured = await server(null);
  t.teardown(() => configured.close());
  const named = (await configured.request('GET', '/ui/login', { token: null })).text;
  t.match(named, "<code>apiToken</code> in this server's configuration");
  t.notMatch(named, 'api-token</code>');
});

t.test('sign-in: a wrong token gets no cookie; the right one an HttpOnly SameSite=Strict session', async (t) => {
  const s = await server();
  t.teardown(() => s.close());
  const form = { 'content-type': 'application/x-www-form-urlencoded' };
  const wrong = await s.request('POST', '/ui/session', { token: null, headers: form, body: 'token=nope' });
  t.equal(wrong.status, 303);
  t.equal(wrong.headers.location, '/ui/login#failed');
  t.equal(wrong.headers['set-cookie'], undefined);

  const right = await s.request('POST', '/ui/session', {
    token: null,
    headers: form,
    body: `token=${encodeURIComponent(TOKEN)}`,
  });
  t.equal(right.status, 303);
  t.equal(right.headers.location, '/ui/');
  const signIns = s.lines.map((l) => JSON.parse(l)).filter((l) => String(l.msg).startsWith('status page sign-in'));
  t.same(
    signIns.map((l) => l.requestId),
    [wrong.headers['x-request-id'], right.headers['x-request-id']],
    'sign-in lines name their request',
  );
  const setCookie = String(right.headers['set-cookie']);
  t.match(setCookie, /^turnhost_session=[A-Za-z0-9_-]{43}; /);
  t.match(setCookie, /; HttpOnly/);
  t.match(setCookie, /; SameSite=Strict/);
  t.notMatch(setCookie, new RegExp(TOKEN), 'the cookie is not the token');
  const cookie = cookieOf(right.headers['set-cookie']);

  const status = await s.request('GET', '/api/status', { token: null, headers: { cookie } });
  t.equal(status.status, 200, 'a session reads status');
  t.equal((await s.request('GET', '/api/activity', { token: null, headers: { cookie } })).status, 200);
  t.equal((await s.request('GET', '/metrics', { token: null, headers: { cookie } })).status, 200);
  const probe = await s.request('POST', '/api/status/worker-host', { token: null, headers: { cookie } });
  t.equal(probe.status, 401, 'a session cannot change anything: POST needs the token');
  const forged = await s.request('GET', '/api/status', {
    token: null,
    headers: { cookie: 'turnhost_session=' + 'A'.repeat(43) },
  });
  t.equal(forged.status, 401, 'an unknown session id is refused');

  const otherOrigin = await s.request('POST', '/ui/session/end', {
    token: null,
    headers: { cookie, origin: 'http://127.0.0.1:1' },
  });
  t.equal(otherOrigin.status, 403, 'sign-out from another origin is refused');
  const end = await s.request('POST', '/ui/session/end', { token: null, headers: { cookie } });
  t.equal(end.status, 303);
  t.match(String(end.headers['set-cookie']), /Max-Age=0/);
  t.equal(
    (await s.request('GET', '/api/status', { token: null, headers: { cookie } })).status,
    401,
    'the session is gone after sign-out',
  );
  const crossSite = await s.request('POST', '/ui/session', {
    token: null,
    headers: { ...form, origin: 'http://evil.example' },
    body: `token=${encodeURIComponent(TOKEN)}`,
  });
  t.equal(crossSite.status, 403, 'sign-in from another origin is refused');
});

t.test('the event stream takes a session only from a page of the same origin', async (t) => {
  const s = await server();
  t.teardown(() => s.close());
  const signedIn = await s.request('POST', '/ui/session', {
    token: null,
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: `token=${encodeURIComponent(TOKEN)}`,
  });
  const cookie = cookieOf(signedIn.headers['set-cookie']);
  const port = s.server.tcp!.port;
  const url = `ws://127.0.0.1:${port}/api/governance/events/stream`;

  const foreign = new WebSocket(url, { headers: { cookie, origin: `http://127.0.0.1:${port + 1}` } });
  t.equal((await upgradeRefusal(foreign)).status, 401, 'a page of another port (same site) is refused');
  const noOrigin = new WebSocket(url, { headers: { cookie } });
  t.equal((await upgradeRefusal(noOrigin)).status, 401, 'no Origin: refused');
  const attach = new WebSocket(`ws://127.0.0.1:${port}/api/turns/x/attach`, {
    headers: { cookie, origin: `http://127.0.0.1:${port}` },
  });
  t.equal((await upgradeRefusal(attach)).status, 401, 'a session cannot attach to a turn');

  const own = new WebSocket(url, { headers: { cookie, origin: `http://127.0.0.1:${port}` } });
  await opened(own);
  const got = nextMessages(own, 1);
  s.store.append(event('egress_denial', 's1', 't1'));
  const [message] = await got;
  t.equal(message.event.kind, 'egress_denial', 'live events reach the page');
  own.close();
});

t.test('/metrics: token or session only, Prometheus text that parses', async (t) => {
  const s = await server();
  t.teardown(() => s.close());
  t.equal((await s.request('GET', '/metrics', { token: null })).status, 401);
  s.store.append(event('egress_denial', 's1', 't1'));
  const res = await s.request('GET', '/metrics');
  t.equal(res.status, 200);
  t.match(res.headers['content-type'], /^text\/plain; version=0\.0\.4/);
  const families = parsePrometheusTextFormat(res.text) as Array<{ name: string; metrics: Array<{ value?: string }> }>;
  t.ok(families.length > 15, `${families.length} metric families`);
  for (const family of families)
    for (const metric of family.metrics)
      if (metric.value !== undefined) t.ok(FLOAT.test(metric.value), `${family.name} value`);
  t.match(res.text, /^turnhost_egress_denials_total\{reason="other"\} 1$/m);

  const activity = await s.request('GET', '/api/activity');
  t.equal(activity.json.recentDenials[0].payload.host, 'blocked.example');
  t.same(activity.json.runningTurns, []);
});
