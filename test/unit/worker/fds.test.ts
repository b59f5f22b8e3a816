import t from 'tap';
import { findUnexpectedFds } from '../../../worker/fds.js';

t.test('inherited fd rule', async (t) => {
  const base = [
    { fd: 0, target: '/dev/null' },
    { fd: 1, target: 'pipe:[1]' },
    { fd: 2, target: 'pipe:[2]' },
    { fd: 3, target: 'socket:[9]' },
    { fd: 4, target: 'anon_inode:[eventpoll]' },
    { fd: 5, target: 'pipe:[7]' },
    { fd: 6, target: 'pipe:[7]' },
    { fd: 7, target: 'anon_inode:[eventfd]' },
  ];
  t.same(findUnexpectedFds(base), []);
  t.same(findUnexpectedFds([...base, { fd: 8, target: '/home' }]).map((f) => f.fd), [8], 'a directory fd');
  t.same(findUnexpectedFds([...base, { fd: 8, target: 'pipe:[99]' }]).map((f) => f.fd), [8], 'a lone pipe end');
  t.same(findUnexpectedFds([...base, { fd: 8, target: 'socket:[5]' }]).map((f) => f.fd), [8], 'a socket');
  t.same(findUnexpectedFds([...base, { fd: 8, target: 'anon_inode:[io_uring]' }]), [], "libuv's own rings (Debian 13's nodejs)");
  t.same(findUnexpectedFds([{ fd: 3, target: '/etc/passwd' }]).map((f) => f.fd), [3], 'fd 3 must be a socket');
});
