/**
 * The generated OpenAPI document under Redocly CLI's recommended rules (redocly.yaml, pinned
 * @redocly/cli): no error and no warning. Redocly runs offline: telemetry is off (config and
 * environment) and the update check is suppressed, so no request leaves the machine.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { buildOpenApi, renderOpenApi } from '../../../api/openapi.js';
import { REPO_ROOT } from '../../support/turn-harness.js';

const REDOCLY = path.join(REPO_ROOT, 'node_modules/.bin/redocly');
const CONFIG = path.join(REPO_ROOT, 'redocly.yaml');

interface Problem {
  ruleId: string;
  severity: 'error' | 'warn';
  message: string;
  location: Array<{ pointer: string }>;
}

/** Redocly's findings on `text` as an OpenAPI document, with the repository's configuration. */
interface LintReport {
  totals: { errors: number; warnings: number; ignored: number };
  problems: Problem[];
}

function lint(t: Test, text: string): LintReport {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-redocly-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'openapi.json');
  fs.writeFileSync(file, text);
  const run = spawnSync(REDOCLY, ['lint', file, `--config=${CONFIG}`, '--format=json'], {
    cwd: dir,
    encoding: 'utf8',
    env: {
      PATH: process.env['PATH'] ?? '/usr/bin:/bin',
      HOME: dir,
      REDOCLY_TELEMETRY: 'off',
      REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true',
      NO_COLOR: '1',
    },
  });
  t.ok(run.stdout.startsWith('{'), `redocly answered JSON (exit ${run.status}): ${run.stderr}`);
  return JSON.parse(run.stdout) as LintReport;
}

const describe = (problems: Problem[]): string =>
  problems.map((p) => `${p.severity} ${p.ruleId} ${p.location[0]?.pointer}: ${p.message}`).join('\n');

t.test('the generated document lints clean: no error, no warning', async (t) => {
  const { totals, problems } = lint(t, renderOpenApi());
  t.same(totals, { errors: 0, warnings: 0, ignored: 0 }, describe(problems));
});

t.test('the lint can fail: a missing server, an unused component, a misspelt extension', async (t) => {
  const document = buildOpenApi() as {
    servers?: unknown;
    components: { schemas: Record<string, unknown> };
    paths: Record<string, Record<string, Record<string, unknown>>>;
  };
  delete document.servers;
  document.components.schemas['Orphan'] = { type: 'object' };
  const attach = document.paths['/api/turns/{id}/attach']!['get']!;
  (attach['x-turnhost-websocket'] as { messages: Record<string, unknown> }).messages['sever'] = { type: 'object' };
  const { problems } = lint(t, JSON.stringify(document));
  const found = problems.map((p) => `${p.ruleId} ${p.location[0]?.pointer}`);
  t.ok(found.includes('no-empty-servers #/openapi'), describe(problems));
  t.ok(found.includes('no-unused-components #/components/schemas/Orphan'), describe(problems));
  t.ok(
    found.includes('struct #/paths/~1api~1turns~1{id}~1attach/get/x-turnhost-websocket/messages/sever'),
    describe(problems),
  );
});
