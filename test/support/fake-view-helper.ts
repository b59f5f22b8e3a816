/**
 * A stand-in for the helper's `view` operation answering what a correct masked view shows, for
 * unit tests of the probes' verdicts. The real helper builds these views in
 * test/integration/identity-helper/view.test.ts.
 */
import { ok } from '../../core/result.js';
import type { HelperViewEntry, HelperViewRequest } from '../../supervisor/identity/helper-view.js';
import type { HelperViewProbe } from '../../supervisor/probes/view.js';

/** A fake helper answering what a correct view shows, with `tamper` applied to one entry. */
export function fakeViewHelper(tamper: (entry: HelperViewEntry) => HelperViewEntry = (entry) => entry): {
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
      if (name === 'masked-file' || name === 'masked-dir' || name === 'hidden' || path === '/sys/fs/cgroup')
        entry.empty = true;
      const gone =
        name === 'host-only' ||
        name.startsWith('turnhost-view-probe-') ||
        path === `/proc/${process.pid}` ||
        path === '/dev/log' ||
        path === '/etc/shadow' ||
        path === '/home' ||
        (strict && path.startsWith('/sys')) ||
        (path.startsWith('/sys/class/net/') && name !== 'lo');
      if (gone) entry.exists = false;
      if (path === '/tmp' || path === '/dev/shm' || (name === 'workspace' && !strict)) entry.write = true;
      return tamper(entry);
    });
    return ok({ workerUid: request.uid ?? 0, viewBuilt: true, entries });
  };
  return { run, requests };
}
