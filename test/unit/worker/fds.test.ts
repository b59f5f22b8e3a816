import t from 'tap';
import { checkInheritedFds, findUnexpectedFds } from '../../../worker/fds.js';

/** What a clean worker start lists: stdio, the two sockets, and Node's own epoll, self-pipe and eventfd. */
const base = [
  { fd: 0, target: '/dev/null' },
  { fd: 1, target: 'pipe:[1]' },
  { fd: 2, target: 'pipe:[2]' },
  { fd: 3, target: 'socket:[9]' },
  { fd: 4, target: 'socket:[10]' },
  { fd: 5, target: 'anon_inode:[eventpoll]' },
  { fd: 6, target: 'pipe:[7]' },
  { fd: 7, target: 'pipe:[7]' },
  { fd: 8, target: 'anon_inode:[eventfd]' },
];

t.test('inherited fd rule', async (t) => {
  t.same(findUnexpectedFds(base), []);
  t.same(
    findUnexpectedFds([...base, { fd: 9, target: '/home' }]).map((f) => f.fd),
    [9],
    'a directory fd',
  );
  t.same(
    findUnexpectedFds([...base, { fd: 9, target: 'pipe:[99]' }]).map((f) => f.fd),
    [9],
    'a lone pipe end',
  );
  t.same(
    findUnexpectedFds([...base, { fd: 9, target: 'socket:[5]' }]).map((f) => f.fd),
    [9],
    'a socket',
  );
  t.same(
    findUnexpectedFds([...base, { fd: 9, target: 'anon_inode:[io_uring]' }]),
    [],
    "libuv's own rings (Debian 13's nodejs)",
  );
  t.same(
    findUnexpectedFds([{ fd: 3, target: '/etc/passwd' }]).map((f) => f.fd),
    [3],
    'fd 3 must be a socket',
  );
  t.same(
    findUnexpectedFds([{ fd: 4, target: 'anon_inode:[eventpoll]' }]).map((f) => f.fd),
    [4],
    'fd 4 must be a socket (the listener channel)',
  );
});

t.test('inherited fd check: an fd outside the rule counts when it is there in every listing', async (t) => {
  /** A lister that returns `listings` in turn (the last one again when they run out) and counts its calls. */
  const scripted = (...listings: { fd: number; target: string }[][]) => {
    let calls = 0;
    const list = () => ({ ok: true as const, fds: listings[Math.min(calls++, listings.length - 1)]! });
    return { list, calls: () => calls };
  };

  const transient = scripted([...base, { fd: 20, target: '/proc/sys/vm/overcommit_memory' }], base);
  t.same(
    checkInheritedFds(transient.list),
    { ok: true, fds: base },
    "a file one of Node's threads had open for a moment",
  );
  t.equal(transient.calls(), 2, 'listing stops at the first clean listing');

  const clean = scripted(base);
  t.equal(checkInheritedFds(clean.list).ok, true);
  t.equal(clean.calls(), 1, 'a clean start lists once');

  const leaked = scripted([...base, { fd: 9, target: '/home' }]);
  const refused = checkInheritedFds(leaked.list);
  t.match(
    refused,
    { ok: false, reason: 'unexpected_fds', detail: /found 9 -> \/home$/ },
    'an inherited directory fd is refused',
  );
  t.equal(leaked.calls(), 3);

  const renamed = scripted(
    [...base, { fd: 9, target: '/srv/a' }],
    [...base, { fd: 9, target: '/srv/b' }],
    [...base, { fd: 9, target: '/srv/b (deleted)' }],
  );
  t.match(
    checkInheritedFds(renamed.list),
    { ok: false, detail: /found 9 -> \/srv\/b \(deleted\)$/ },
    'by fd number: a leaked file renamed or deleted meanwhile is still refused',
  );

  const moved = scripted(
    [...base, { fd: 20, target: '/proc/sys/vm/overcommit_memory' }],
    [...base, { fd: 21, target: '/proc/sys/vm/overcommit_memory' }],
    base,
  );
  t.equal(checkInheritedFds(moved.list).ok, true, 'transients at other numbers in each listing');

  t.match(checkInheritedFds(scripted(base.filter((f) => f.fd !== 4)).list), {
    ok: false,
    detail: 'listener channel fd 4 is not open',
  });
  t.match(
    checkInheritedFds(() => ({ ok: false, reason: 'fd_list_failed', detail: 'cannot list /proc/self/fd: EMFILE' })),
    {
      ok: false,
      reason: 'unexpected_fds',
      detail: 'cannot list /proc/self/fd: EMFILE',
    },
  );
});
