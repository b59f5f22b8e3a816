import t from 'tap';
import { buildOpenApi } from '../../../../api/openapi.js';
import { EVENT_KINDS } from '../../../../supervisor/events/kinds.js';

const valid: Record<string, Record<string, unknown>> = {
  worker_launch: {
    mode: 'ordinary',
    profile: 'governed',
    identity: 'shared_uid',
    workerUid: null,
    command: 'bash',
    cgroup: null,
    limits: {},
  },
  worker_exit: { status: 'exited', exitCode: 0, signal: null, durationMs: 12.5, usage: {}, limitHits: [] },
  worker_host_refusal: { mode: 'restricted', requirement: 'seccomp', trigger: 'turn' },
  boundary_attested: { held: 36, broken: 1, skipped: 2, brokenCases: ['seccomp.ptrace'], trigger: 'check' },
  worker_recovered: { cgroup: '/turn-1', usage: {}, killedProcesses: 2 },
  egress_connection: {
    host: 'api.test',
    port: 443,
    method: 'POST',
    path: '/v1',
    bytesUp: 1,
    bytesDown: 2,
    durationMs: 3,
    outcome: 'ok',
    scope: 'inference',
    inference: true,
    broker: 'claude',
    status: 200,
  },
  egress_denial: { host: 'x.test', port: null, reason: 'not_allowed' },
  host_write: { path: '/w/a', bytes: 3, sha256: 'ab', replaced: false },
  host_write_refused: { path: '/w/a', reason: 'symlink' },
  turn_temp_purge: { bytes: 2, inodes: 1, outcome: 'purged' },
  scratch_overage: { bytes: 10, pinnedFiles: 1, pinnedBytes: 2, overageBytes: 3 },
  session_deleted: { sessionId: 's1', events: 4, turns: 2, workspaces: 1, trigger: 'retention' },
  host_drain: { draining: true, source: 'signal', turnsRunning: 2 },
  workspace_created: { workspaceId: 'ws', uid: 3100000, identity: 'separate_uid' },
  workspace_deleted: { workspaceId: 'ws', bytesRemoved: 4096, filesRemoved: 1 },
  workspace_delete_failed: { workspaceId: 'ws', attempt: 0, detail: 'release: busy', retryInSeconds: 2 },
  workspace_directory_made: { workspaceId: 'ws', path: 'src/lib', made: 2 },
  workspace_entry_removed: { workspaceId: 'ws', path: 'build', files: 3, bytes: 12288, directories: 1 },
  workspace_file_refused: { workspaceId: 'ws', operation: 'write', path: 'link/x', reason: 'alias_denied' },
  workspace_archive_extracted: { workspaceId: 'ws', path: 'src', files: 3, directories: 2, bytes: 120 },
  workspace_archive_refused: {
    workspaceId: 'ws',
    path: '.',
    reason: 'invalid_archive',
    entry: 'a/link',
    files: 1,
    directories: 1,
    bytes: 4,
  },
  workspace_archive_read: {
    workspaceId: 'ws',
    path: '.',
    complete: true,
    files: 3,
    directories: 2,
    symlinks: 1,
    bytes: 120,
    skipped: 0,
  },
};

// A kind's version moves only when a field's meaning changes; every bump is listed here on purpose.
const schemaVersions: Record<string, number> = { turn_temp_purge: 2 };

t.test('every registered kind has its expected version and accepts a valid payload, plus unknown fields', async (t) => {
  t.same([...EVENT_KINDS.keys()].sort(), Object.keys(valid).sort());
  for (const [name, kind] of EVENT_KINDS) {
    t.equal(kind.schemaVersion, schemaVersions[name] ?? 1, name);
    t.ok(kind.validate(valid[name]!).ok, `${name} valid`);
    t.ok(kind.validate({ ...valid[name]!, addedLater: 'x' }).ok, `${name} additive field`);
  }
});

t.test('every required field is enforced and named', async (t) => {
  for (const [name, kind] of EVENT_KINDS) {
    for (const field of Object.keys(valid[name]!)) {
      const { [field]: _dropped, ...missing } = valid[name]!;
      const result = kind.validate(missing);
      t.notOk(result.ok, `${name} without ${field}`);
      if (!result.ok) t.match(result.detail, `payload.${field}`);
    }
  }
});

t.test('wrong types and values are refused', async (t) => {
  const check = (kind: string, patch: Record<string, unknown>, field: string) => {
    const result = EVENT_KINDS.get(kind)!.validate({ ...valid[kind]!, ...patch });
    t.notOk(result.ok, `${kind} ${JSON.stringify(patch)}`);
    if (!result.ok) t.match(result.detail, `payload.${field} must be`);
  };
  check('worker_launch', { mode: 'other' }, 'mode');
  check('worker_launch', { identity: 'root' }, 'identity');
  check('worker_launch', { workerUid: -1 }, 'workerUid');
  check('worker_launch', { limits: [] }, 'limits');
  check('worker_exit', { exitCode: 1.5 }, 'exitCode');
  check('worker_exit', { limitHits: ['memory', 3] }, 'limitHits');
  check('worker_host_refusal', { trigger: 'later' }, 'trigger');
  check('egress_connection', { port: 70000 }, 'port');
  check('egress_connection', { scope: 'any' }, 'scope');
  check('egress_connection', { inference: 'yes' }, 'inference');
  check('egress_connection', { status: '200' }, 'status');
  check('egress_connection', { broker: 7 }, 'broker');
  check('egress_connection', { bytesUp: -1 }, 'bytesUp');
  check('egress_connection', { durationMs: Number.NaN }, 'durationMs');
  check('host_write', { replaced: 1 }, 'replaced');
  check('turn_temp_purge', { outcome: 'walked' }, 'outcome');
  check('turn_temp_purge', { inodes: -1 }, 'inodes');
});

t.test('worker_launch.command is the basename of argv[0], never a path or arguments', async (t) => {
  const launch = EVENT_KINDS.get('worker_launch')!;
  for (const command of ['/usr/bin/curl', 'curl -H Authorization:secret', 'curl\tx', '', 'a\0b']) {
    const result = launch.validate({ ...valid.worker_launch!, command });
    t.notOk(result.ok, JSON.stringify(command));
    if (!result.ok) t.match(result.detail, 'payload.command');
  }
  t.ok(launch.validate({ ...valid.worker_launch!, command: 'python3.11' }).ok);
});

t.test('every refused field is reported, not only the first', async (t) => {
  const result = EVENT_KINDS.get('egress_connection')!.validate({
    ...valid['egress_connection']!,
    port: 70000,
    scope: 'any',
    bytesUp: undefined,
  });
  t.notOk(result.ok);
  if (!result.ok) {
    t.match(result.detail, 'payload.port must be a port number (0-65535)');
    t.match(result.detail, "payload.scope must be one of 'inference', 'credential', 'tool'");
    t.match(result.detail, 'payload.bytesUp');
  }
  const missing = EVENT_KINDS.get('host_write_refused')!.validate({});
  t.same(missing.ok ? null : missing.detail, 'payload.path is required; payload.reason is required');
});

t.test('the payload schemas are in the OpenAPI document, with their versions', async (t) => {
  const kinds = (buildOpenApi() as { 'x-event-kinds': Record<string, { schemaVersion: number }> })['x-event-kinds'];
  t.same(Object.keys(kinds).sort(), [...EVENT_KINDS.keys()].sort());
  for (const [name, kind] of EVENT_KINDS) t.equal(kinds[name]?.schemaVersion, kind.schemaVersion, name);
});
