import t from 'tap';
import { findUnexpectedFds } from '../../../worker/fds.js';

t.test('inherited fd rule', async (t) => {
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
  t.same(findUnexpectedFds(base), []);
  t.same(findUnexpectedFds([...base, { fd: 9, target: '/home' }]).map((f) => f.fd), [9], 'a directory fd');
  t.same(findUnexpectedFds([...base, { fd: 9, target: 'pipe:[99]' }]).map((f) => f.fd), [9], 'a lone pipe end');
  t.same(findUnexpectedFds([...base, { fd: 9, target: 'socket:[5]' }]).map((f) => f.fd), [9], 'a socket');
  t.same(findUnexpectedFds([...base, { fd: 9, target: 'anon_inode:[io_uring]' }]), [], "libuv's own rings (Debian 13's nodejs)");
  t.same(findUnexpectedFds([{ fd: 3, target: '/etc/passwd' }]).map((f) => f.fd), [3], 'fd 3 must be a socket');
  t.same(findUnexpectedFds([{ fd: 4, target: 'anon_inode:[eventpoll]' }]).map((f) => f.fd), [4], 'fd 4 must be a socket (the listener channel)');
});
