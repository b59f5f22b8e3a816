import t from 'tap';
import { fail, ok } from '../../../../core/result.js';
import type { HelperViewEntry, HelperViewRequest } from '../../../../supervisor/identity/helper-client.js';
import { probeMaskedView, type HelperViewProbe } from '../../../../supervisor/probes/view.js';

/** A fake helper answering what a correct view shows, with `tamper` applied to one entry. */
function fakeHelper(tamper: (entry: HelperViewEntry) => HelperViewEntry = (entry) => entry): {
  run: HelperViewProbe;
  requests: HelperViewRequest[];
} {
  const requests: HelperViewRequest[] = [];
  const run: HelperViewProbe = async (request) => {
    requests.push(request);
    const strict = request.profile === 'strict';
    const entries = request.paths.map((path) => {
      const name = path.split('/').pop() ?? '';
      const entry: HelperViewEntry = { path, read: true, write: false, exists: true, empty: false };
      if (name === 'masked-file' || name === 'masked-dir') entry.empty = true;
      if (name === 'host-only' || path === '/proc/1' || path === '/etc/shadow' || path === '/home')
        entry.exists = false;
      if (name === 'temp' || (name === 'workspace' && !strict)) entry.write = true;
      return tamper(entry);
    });
    return ok({ workerUid: request.uid ?? 0, viewBuilt: true, entries });
  };
  return { run, requests };
}

const uid = process.getuid?.() ?? 0; // chown to our own uid always works

t.test('a view that holds answers no requirement and cleans its sentinel tree', async (t) => {
  for (const profile of ['governed', 'strict'] as const) {
    const helper = fakeHelper();
    t.equal(await probeMaskedView(helper.run, profile, uid), undefined);
    const request = helper.requests[0]!;
    t.same(
      request.protect?.map((rule) => rule.mode),
      ['mask_file', 'mask_directory', 'read_only'],
    );
    t.match(request.workspace, /^\/tmp\/turnhost-view-probe-/);
    const fs = await import('node:fs');
    t.notOk(fs.existsSync(request.workspace!), 'sentinel tree removed');
  }
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
    ['host /tmp visible', (e) => (e.path.endsWith('host-only') ? { ...e, exists: true } : e), /fresh one/],
    ['/proc shows others', (e) => (e.path === '/proc/1' ? { ...e, exists: true } : e), /invisible in \/proc/],
    ['/etc writable', (e) => (e.path === '/etc' ? { ...e, write: true } : e), /host system directories/],
  ];
  for (const [name, tamper, pattern] of cases) {
    t.match(await probeMaskedView(fakeHelper(tamper).run, 'governed', uid), pattern, name);
  }
  const strictHome = fakeHelper((e) => (e.path === '/home' ? { ...e, exists: true } : e));
  t.match(
    await probeMaskedView(strictHome.run, 'strict', uid),
    /the strict worker view does not hold: \/home must be absent/,
  );
  const strictWritable = fakeHelper((e) => (e.path.endsWith('/workspace') ? { ...e, write: true } : e));
  t.match(await probeMaskedView(strictWritable.run, 'strict', uid), /workspace must be read-only/);
});

t.test('a helper refusal is a requirement', async (t) => {
  const refusing: HelperViewProbe = async () =>
    fail('view_refused', 'view: workspace /x is or passes through a symbolic link');
  t.equal(
    await probeMaskedView(refusing, 'governed', uid),
    'the governed worker view cannot be built: view: workspace /x is or passes through a symbolic link',
  );
});
