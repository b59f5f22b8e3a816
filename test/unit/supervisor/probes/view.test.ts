/**
 * The masked-view probe's verdicts against a fake `view` runner: what a correct view shows
 * passes, and each broken promise becomes a requirement naming it. The real helper builds
 * these views in test/integration/identity-helper/view.test.ts.
 */
import fs from 'node:fs';
import t from 'tap';
import { fail } from '../../../../core/result.js';
import type { HelperViewEntry } from '../../../../supervisor/identity/helper-view.js';
import { probeMaskedView, type HelperViewProbe } from '../../../../supervisor/probes/view.js';
import { fakeViewHelper as fakeHelper } from '../../../support/fake-view-helper.js';

const OWN_STATE = ['/var/lib/turnhost-probe-test-data'];

const options = { workerUid: 3_100_001, hide: ['/var/lib/turnhost-probe-test-data'], ownState: [] };

t.test('a view that holds answers no requirement and cleans its sentinel tree', async (t) => {
  for (const profile of ['governed', 'strict'] as const) {
    const helper = fakeHelper();
    const probed = await probeMaskedView(helper.run, profile, options);
    t.equal(probed.requirement, undefined, profile);
    const request = helper.requests[0]!;
    t.same(
      request.protect?.map((rule) => rule.mode),
      ['mask_file', 'mask_directory', 'read_only'],
    );
    t.match(request.workspace, /^\/tmp\/turnhost-view-probe-/);
    t.equal(request.uid, options.workerUid);
    t.match(
      request.hide,
      [/\/hidden$/, '/var/lib/turnhost-probe-test-data'],
      "the sentinel's hidden path, then the turns' own",
    );
    t.notOk(fs.existsSync(request.workspace!), 'sentinel tree removed');
  }
});

t.test('shared mode names no uid: the launcher runs as the supervisor', async (t) => {
  const helper = fakeHelper();
  await probeMaskedView(helper.run, 'governed', { hide: [], ownState: [] });
  t.equal(helper.requests[0]?.uid, undefined);
});

t.test('each broken promise becomes a requirement naming it', async (t) => {
  const cases: Array<[string, (e: HelperViewEntry) => HelperViewEntry, RegExp]> = [
    [
      'mask_file readable',
      (e) => (e.path.endsWith('masked-file') ? { ...e, empty: false } : e),
      /mask_file path must read empty/,
    ],
    ['mask_directory writable', (e) => (e.path.endsWith('masked-dir') ? { ...e, write: true } : e), /mask_directory/],
    ['read_only writable', (e) => (e.path.endsWith('read-only') ? { ...e, write: true } : e), /read_only path/],
    ['hidden path shown', (e) => (e.path.endsWith('/hidden') ? { ...e, empty: false } : e), /hidden path/],
    ['host /tmp visible', (e) => (e.path.endsWith('host-only') ? { ...e, exists: true } : e), /fresh one/],
    [
      '/proc shows others',
      (e) => (e.path === `/proc/${process.pid}` ? { ...e, exists: true } : e),
      /invisible in \/proc/,
    ],
    ['/etc writable', (e) => (e.path === '/etc' ? { ...e, write: true } : e), /host system directories/],
    ['/tmp not writable', (e) => (e.path === '/tmp' ? { ...e, write: false } : e), /turn's \/tmp must be writable/],
    [
      '/dev/shm not writable',
      (e) => (e.path === '/dev/shm' ? { ...e, write: false } : e),
      /\/dev\/shm must be writable/,
    ],
    ['host /dev kept', (e) => (e.path === '/dev/log' ? { ...e, exists: true } : e), /no \/dev\/log socket/],
  ];
  for (const [name, tamper, pattern] of cases) {
    t.match((await probeMaskedView(fakeHelper(tamper).run, 'governed', options)).requirement, pattern, name);
  }
  const strictHome = fakeHelper((e) => (e.path === '/home' ? { ...e, exists: true } : e));
  t.match(
    (await probeMaskedView(strictHome.run, 'strict', options)).requirement,
    /the strict worker view does not hold: \/home must be absent/,
  );
  const strictWritable = fakeHelper((e) => (e.path.endsWith('/workspace') ? { ...e, write: true } : e));
  t.match((await probeMaskedView(strictWritable.run, 'strict', options)).requirement, /workspace must be read-only/);
});

t.test("the supervisor's own state must be hidden", async (t) => {
  fs.mkdirSync(OWN_STATE[0]!, { recursive: true });
  t.teardown(() => fs.rmSync(OWN_STATE[0]!, { recursive: true, force: true }));
  const shown = fakeHelper((e) => (e.path === OWN_STATE[0] ? { ...e, empty: false } : e));
  t.match(
    (await probeMaskedView(shown.run, 'governed', { ...options, ownState: OWN_STATE })).requirement,
    /the supervisor's own state must never be visible/,
  );
  const masked = fakeHelper((e) => (e.path === OWN_STATE[0] ? { ...e, empty: true } : e));
  t.equal((await probeMaskedView(masked.run, 'governed', { ...options, ownState: OWN_STATE })).requirement, undefined);
});

t.test('facts for the root-server warning: a root-owned file and the host tree', async (t) => {
  // Only root can plant a root-owned file; without one the fact is unknown.
  const root = process.geteuid?.() === 0;
  const readable = await probeMaskedView(fakeHelper().run, 'governed', options);
  t.same(readable.facts, { rootOwnedReadable: root ? true : null, hostWritable: false });
  const unreadable = fakeHelper((e) => (e.path.endsWith('root-only') ? { ...e, read: false } : e));
  t.same((await probeMaskedView(unreadable.run, 'governed', options)).facts, {
    rootOwnedReadable: root ? false : null,
    hostWritable: false,
  });
});

t.test('a helper refusal is a requirement', async (t) => {
  const refusing: HelperViewProbe = async () =>
    fail('view_refused', 'view: workspace /x is or passes through a symbolic link');
  t.equal(
    (await probeMaskedView(refusing, 'governed', options)).requirement,
    'the governed worker view cannot be built: view: workspace /x is or passes through a symbolic link',
  );
});
