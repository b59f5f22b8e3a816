import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { tokenMatches } from '../../../../supervisor/http/auth.js';
import { tokenFilePath } from '../../../../supervisor/config/token-path.js';
import { ensureApiToken, readTokenFile } from '../../../../supervisor/http/token.js';

function dataDir(t: { teardown(fn: () => void): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-token-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('first start generates a 0600 token; later starts reuse it', async (t) => {
  const dir = dataDir(t);
  const first = ensureApiToken({ apiToken: null, dataDir: dir });
  t.match(first, { ok: true, source: 'generated', token: /^[A-Za-z0-9_-]{43}$/ });
  t.equal(fs.statSync(tokenFilePath(dir)).mode & 0o777, 0o600);
  const second = ensureApiToken({ apiToken: null, dataDir: dir });
  t.match(second, { ok: true, source: 'file' });
  if (first.ok && second.ok) t.equal(second.token, first.token);
});

t.test('a configured token wins and no file is written', async (t) => {
  const dir = dataDir(t);
  t.match(ensureApiToken({ apiToken: 'configured-token-123456', dataDir: dir }), {
    ok: true,
    source: 'config',
    token: 'configured-token-123456',
  });
  t.notOk(fs.existsSync(tokenFilePath(dir)));
});

t.test('unsafe token files are refused, never trusted or replaced', async (t) => {
  const dir = dataDir(t);
  fs.writeFileSync(tokenFilePath(dir), 'a-token-readable-by-others\n', { mode: 0o644 });
  fs.chmodSync(tokenFilePath(dir), 0o644);
  t.match(ensureApiToken({ apiToken: null, dataDir: dir }), {
    ok: false,
    reason: 'token_unusable',
    detail: /readable by group or others/,
  });
  t.equal(fs.readFileSync(tokenFilePath(dir), 'utf8'), 'a-token-readable-by-others\n', 'left as it was');

  const linked = dataDir(t);
  const target = path.join(linked, 'elsewhere');
  fs.writeFileSync(target, 'attacker-chosen-token-value\n', { mode: 0o600 });
  fs.symlinkSync(target, tokenFilePath(linked));
  t.match(
    ensureApiToken({ apiToken: null, dataDir: linked }),
    { ok: false, reason: 'token_unusable' },
    'a symlink is not followed',
  );

  const dangling = dataDir(t);
  fs.symlinkSync(path.join(dangling, 'planted'), tokenFilePath(dangling));
  t.match(
    ensureApiToken({ apiToken: null, dataDir: dangling }),
    { ok: false, reason: 'token_unusable' },
    'no token is written through a dangling link',
  );
  t.notOk(fs.existsSync(path.join(dangling, 'planted')));

  const short = dataDir(t);
  fs.writeFileSync(tokenFilePath(short), 'x\n', { mode: 0o600 });
  t.match(readTokenFile(short), { ok: false, reason: 'token_unusable', detail: /not a token/ });
});

t.test('tokenMatches', async (t) => {
  t.ok(tokenMatches('same-token-value', 'same-token-value'));
  t.notOk(tokenMatches('same-token-valuE', 'same-token-value'));
  t.notOk(tokenMatches('same', 'same-token-value'));
  t.notOk(tokenMatches('', 'same-token-value'));
});
