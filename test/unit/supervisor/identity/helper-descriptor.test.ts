import t from 'tap';
import {
  encodeDescriptor,
  HelperDescriptorError,
  type HelperDescriptor,
} from '../../../../supervisor/identity/helper-descriptor.js';

t.test('encodes a launch descriptor in the documented grammar', async (t) => {
  const bytes = encodeDescriptor({
    op: 'launch',
    uid: 100001,
    gid: 100001,
    cgroups: ['/sys/fs/cgroup/pids/turnhost/t1'],
    rlimits: { nofile: 1024, data: 2n ** 40n },
    hostname: 'turn-1',
    cwd: '/srv/work',
    env: { PATH: '/usr/bin:/bin', NOTE: 'two  spaces' },
    profile: 'governed',
    workspace: '/srv/work',
    tmpSize: 64 * 1024 * 1024,
    uidSearch: true,
    protect: [
      { mode: 'mask_file', path: '.env' },
      { mode: 'read_only', path: '.git/hooks' },
    ],
    hide: ['/var/lib/turnhost', '/etc/shadow'],
  });
  t.equal(
    bytes.toString(),
    [
      'turnhost-descriptor 2',
      'op launch',
      'uid 100001',
      'gid 100001',
      'uid_search yes',
      'cgroup /sys/fs/cgroup/pids/turnhost/t1',
      'rlimit nofile 1024',
      'rlimit data 1099511627776',
      'hostname turn-1',
      'cwd /srv/work',
      'env PATH=/usr/bin:/bin',
      'env NOTE=two  spaces',
      'profile governed',
      'workspace /srv/work',
      'tmp_size 67108864',
      'protect mask_file .env',
      'protect read_only .git/hooks',
      'hide /var/lib/turnhost',
      'hide /etc/shadow',
      'end',
      '',
    ].join('\n'),
  );
});

t.test('encodes probe, view and kill', async (t) => {
  t.equal(encodeDescriptor({ op: 'probe' }).toString(), 'turnhost-descriptor 2\nop probe\nend\n');
  t.equal(
    encodeDescriptor({ op: 'view', profile: 'strict', paths: ['/etc', '/tmp'] }).toString(),
    'turnhost-descriptor 2\nop view\nprofile strict\npath /etc\npath /tmp\nend\n',
  );
  t.equal(encodeDescriptor({ op: 'kill', uid: 5 }).toString(), 'turnhost-descriptor 2\nop kill\nuid 5\nend\n');
  t.equal(
    encodeDescriptor({ op: 'launch', cwd: '/w', profile: 'strict', workspace: '/w' }).toString(),
    'turnhost-descriptor 2\nop launch\ncwd /w\nprofile strict\nworkspace /w\nend\n',
    "a shared-mode launch names no uid: the launcher uses its caller's",
  );
});

t.test('encodes the lease ops with their owner, and a leased launch', async (t) => {
  const workspace = '/srv/workspaces/ws-1';
  t.equal(
    encodeDescriptor({ op: 'lease', uid: 7, uidSearch: true, lease: 'ws-1', owner: 'own_a', workspace }).toString(),
    'turnhost-descriptor 2\nop lease\nuid 7\nuid_search yes\nworkspace /srv/workspaces/ws-1\nlease ws-1\nowner own_a\nend\n',
  );
  t.equal(
    encodeDescriptor({ op: 'lease', uid: 7, adopt: true, lease: 'ws-1', owner: 'own_a', workspace }).toString(),
    'turnhost-descriptor 2\nop lease\nuid 7\nworkspace /srv/workspaces/ws-1\nlease ws-1\nowner own_a\nadopt yes\nend\n',
  );
  t.match(
    encodeDescriptor({ op: 'usage', lease: 'ws-1', owner: 'own_a', workspace }).toString(),
    /\nlease ws-1\nowner own_a\n/,
  );
  t.match(
    encodeDescriptor({
      op: 'launch',
      uid: 7,
      gid: 7,
      cwd: '/',
      profile: 'governed',
      workspace,
      lease: 'ws-1',
      owner: 'own_a',
    }).toString(),
    /\nlease ws-1\nowner own_a\n/,
  );
});

const launch: HelperDescriptor = {
  op: 'launch',
  uid: 100001,
  gid: 100001,
  cwd: '/',
  profile: 'governed',
  workspace: '/srv/work',
};

t.test('refuses what the helper would refuse, naming the field', async (t) => {
  const cases: Array<[string, HelperDescriptor, string]> = [
    ['unknown op', { op: 'shell' as 'probe' }, 'op'],
    ['uid negative', { ...launch, uid: -1, gid: -1 }, 'uid'],
    ['uid fractional', { ...launch, uid: 1.5, gid: 1.5 }, 'uid'],
    ['uid too large', { ...launch, uid: 4294967295, gid: 4294967295 }, 'uid'],
    ['gid differs', { ...launch, gid: 100002 }, 'gid'],
    ['missing cwd', { op: 'launch', uid: 1, gid: 1 }, 'cwd'],
    ['relative cwd', { ...launch, cwd: 'tmp' }, 'cwd'],
    ['dotdot cwd', { ...launch, cwd: '/a/../b' }, 'cwd'],
    ['trailing slash', { ...launch, cwd: '/a/' }, 'cwd'],
    ['newline in cwd', { ...launch, cwd: '/a\nop kill' }, 'cwd'],
    ['cgroup count', { ...launch, cgroups: Array.from({ length: 9 }, (_, i) => `/c/${i}`) }, 'cgroups'],
    ['cgroup relative', { ...launch, cgroups: ['c'] }, 'cgroups[0]'],
    ['rlimit name', { ...launch, rlimits: { core: 1 } as HelperDescriptor['rlimits'] }, 'rlimits.core'],
    ['rlimit negative', { ...launch, rlimits: { nofile: -1 } }, 'rlimits.nofile'],
    ['rlimit huge', { ...launch, rlimits: { nofile: 10n ** 18n } }, 'rlimits.nofile'],
    ['hostname', { ...launch, hostname: '-x' }, 'hostname'],
    ['env name', { ...launch, env: { 'A-B': '1' } }, 'env.A-B'],
    ['env control', { ...launch, env: { A: 'x\ny' } }, 'env.A'],
    ['env NUL', { ...launch, env: { A: 'x\0y' } }, 'env.A'],
    ['env count', { ...launch, env: Object.fromEntries(Array.from({ length: 257 }, (_, i) => [`V${i}`, 'x'])) }, 'env'],
    ['env line length', { ...launch, env: { A: 'x'.repeat(4095) } }, 'env'],
    [
      'total size',
      { ...launch, env: Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`V${i}`, 'x'.repeat(2000)])) },
      'descriptor',
    ],
    ['key for another op', { op: 'probe', cwd: '/' }, 'cwd'],
    ['view without paths', { op: 'view', profile: 'strict', paths: [] }, 'paths'],
    ['view profile', { op: 'view', profile: 'open' as 'strict', paths: ['/'] }, 'profile'],
    ['kill without uid', { op: 'kill' }, 'uid'],
    ['reclaim is gone', { op: 'reclaim' as 'kill', uid: 5 }, 'op'],
    ['launch without profile', { ...launch, profile: undefined }, 'profile'],
    ['launch without workspace', { ...launch, workspace: undefined }, 'workspace'],
    ['workspace /', { ...launch, workspace: '/' }, 'workspace'],
    ['uid search without uid', { ...launch, uid: undefined, gid: undefined, uidSearch: true }, 'uidSearch'],
    ['uid search for a probe', { op: 'probe', uid: 5, uidSearch: true }, 'uidSearch'],
    ['tmp size too small', { ...launch, tmpSize: 4096 }, 'tmpSize'],
    ['tmp size fractional', { ...launch, tmpSize: 2 ** 20 + 0.5 }, 'tmpSize'],
    ['tmp size too large', { ...launch, tmpSize: 2 ** 41 }, 'tmpSize'],
    ['hide relative', { ...launch, hide: ['var/lib'] }, 'hide[0]'],
    ['hide /', { ...launch, hide: ['/'] }, 'hide[0]'],
    ['hide dotdot', { ...launch, hide: ['/a/../etc'] }, 'hide[0]'],
    ['hide count', { ...launch, hide: Array.from({ length: 33 }, (_, i) => `/h${i}`) }, 'hide'],
    ['hide without workspace', { op: 'view', profile: 'strict', paths: ['/'], hide: ['/x'] }, 'workspace'],
    ['protect mode', { ...launch, protect: [{ mode: 'hide' as 'read_only', path: 'x' }] }, 'protect[0].mode'],
    ['protect absolute', { ...launch, protect: [{ mode: 'read_only', path: '/etc' }] }, 'protect[0].path'],
    ['protect dotdot', { ...launch, protect: [{ mode: 'read_only', path: 'a/../../etc' }] }, 'protect[0].path'],
    ['protect dot', { ...launch, protect: [{ mode: 'mask_file', path: '.' }] }, 'protect[0].path'],
    ['protect trailing slash', { ...launch, protect: [{ mode: 'mask_file', path: 'a/' }] }, 'protect[0].path'],
    ['protect newline', { ...launch, protect: [{ mode: 'mask_file', path: 'a\nop kill' }] }, 'protect[0].path'],
    [
      'protect count',
      { ...launch, protect: Array.from({ length: 65 }, (_, i) => ({ mode: 'read_only' as const, path: `p${i}` })) },
      'protect',
    ],
    ['lease without owner', { op: 'lease', uid: 7, lease: 'w', workspace: '/r/w' }, 'owner'],
    ['release without owner', { op: 'release', lease: 'w', workspace: '/r/w' }, 'owner'],
    ['usage without owner', { op: 'usage', lease: 'w', workspace: '/r/w' }, 'owner'],
    ['owner malformed', { op: 'usage', lease: 'w', owner: 'a.b', workspace: '/r/w' }, 'owner'],
    ['leased launch without owner', { ...launch, lease: 'w' }, 'owner'],
    ['owner without lease', { ...launch, owner: 'own_a' }, 'lease'],
    ['owner for a probe', { op: 'probe', owner: 'own_a' }, 'owner'],
    ['adopt for a release', { op: 'release', lease: 'w', owner: 'o', workspace: '/r/w', adopt: true }, 'adopt'],
    [
      'adopt with a search',
      { op: 'lease', uid: 7, uidSearch: true, adopt: true, lease: 'w', owner: 'o', workspace: '/r/w' },
      'adopt',
    ],
    [
      'view protect without workspace',
      { op: 'view', profile: 'governed', paths: ['/'], protect: [{ mode: 'read_only', path: 'x' }] },
      'workspace',
    ],
  ];
  for (const [name, descriptor, field] of cases) {
    t.test(name, async (t) => {
      const error = t.throws(() => encodeDescriptor(descriptor)) as unknown;
      t.ok(error instanceof HelperDescriptorError);
      t.equal((error as HelperDescriptorError).field, field);
      t.equal((error as HelperDescriptorError).code, 'descriptor_invalid');
    });
  }
});
