/**
 * Attack class: dangerous syscalls from inside the worker. A real child process installs the
 * worker's default filter and runs test/native/try-syscall for each denied call. The probes
 * run as root, where the kernel itself would allow most of them, and an unfiltered baseline
 * run proves no probe answers EPERM without the filter.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const probe = path.join(root, 'test/native/build/try-syscall');
const fixture = path.join(root, 'test/escape/fixtures/seccomp-child.ts');
const EPERM = 1;
const ENOSYS = 38;

const DENIED = [
  'ptrace',
  'process_vm_readv',
  'process_vm_writev',
  'keyctl',
  'add_key',
  'request_key',
  'bpf',
  'perf_event_open',
  'userfaultfd',
  'io_uring_setup',
  'io_uring_register',
  'pidfd_getfd',
  'kexec_load',
  'kexec_file_load',
  'init_module',
  'finit_module',
  'delete_module',
  'mount',
  'umount2',
  'open_tree',
  'move_mount',
  'fsopen',
  'fsconfig',
  'fsmount',
  'fspick',
  'mount_setattr',
  'open_tree_attr',
  'pivot_root',
  'chroot',
  'unshare',
  'setns',
  'clone_newns',
  'clone_newnet',
  'clone_newuser',
  'clone_newpid',
  'ioctl_tiocsti',
  'ioctl_tiocsti_high',
  'ioctl_tioclinux',
  'personality',
  'acct',
  'swapon',
  'swapoff',
  'reboot',
  'clock_settime',
  'settimeofday',
  'adjtimex',
  'clock_adjtime',
  'syslog',
  'quotactl',
  'quotactl_fd',
  'open_by_handle_at',
  'modify_ldt',
  'move_pages',
  'migrate_pages',
  'mbind',
  'set_mempolicy',
  'get_mempolicy',
  'socket_packet',
  'socket_vsock',
];
const ALLOWED = [
  'getpid',
  'clone_plain',
  'fork',
  'socket_inet',
  'socket_unix',
  'socket_netlink_route',
  'personality_query',
  'ioctl_tiocgwinsz',
];
const KILLED = ['x32_getpid', 'i386_getpid'];

/**
 * A kernel built or booted without IA32 emulation (`ia32_emulation=0`, or no
 * CONFIG_IA32_EMULATION) faults `int 0x80` with SIGSEGV before seccomp sees it: on such a
 * kernel the foreign ABI cannot run at all, filtered or not. Each ABI is checked unfiltered
 * first; only one the kernel serves must be killed by the filter.
 */
function kernelServes(name: string): boolean {
  const run = spawnSync(probe, [name], { encoding: 'utf8' });
  return run.signal === null;
}
/** Allowed for libuv's own rings; the command can neither create nor obtain one, so it meets EBADF. */
const NO_RING = ['io_uring_enter'];
const EBADF = 9;

interface ProbeResult {
  name: string;
  stdout: string;
  status: number | null;
  signal: string | null;
}

t.before(() => {
  execFileSync('make', ['-C', path.join(root, 'test/native'), 'build/try-syscall'], { stdio: 'ignore' });
});

t.test('without the filter no probe answers EPERM (the probes are meaningful)', async (t) => {
  for (const name of [...DENIED, 'clone3', ...ALLOWED, ...NO_RING]) {
    const run = spawnSync(probe, [name], { encoding: 'utf8' });
    t.equal(run.status, 0, `${name} ran`);
    t.not(run.stdout.trim(), `${name} errno=${EPERM}`, `${name} unfiltered is not EPERM`);
  }
});

t.test('under the default filter', async (t) => {
  const run = spawnSync(
    process.execPath,
    ['--import', 'tsx', fixture, probe, ...DENIED, 'clone3', ...ALLOWED, ...NO_RING, ...KILLED],
    {
      cwd: root,
      encoding: 'utf8',
    },
  );
  t.equal(run.status, 0, `fixture exits 0 (stderr: ${run.stderr})`);
  const report = JSON.parse(run.stdout) as { install: { ok: boolean }; childStatus: string; results: ProbeResult[] };
  t.equal(report.install.ok, true, 'filter installed on every thread');
  t.match(report.childStatus, /^Seccomp:\s+2$/m, 'child of the filtered process: Seccomp 2');
  t.match(report.childStatus, /^NoNewPrivs:\s+1$/m, 'child of the filtered process: NoNewPrivs 1');
  const byName = new Map(report.results.map((r) => [r.name, r]));
  for (const name of DENIED) t.equal(byName.get(name)?.stdout, `${name} errno=${EPERM}`, `${name} -> EPERM`);
  t.equal(byName.get('clone3')?.stdout, `clone3 errno=${ENOSYS}`, 'clone3 -> ENOSYS so libc falls back to clone');
  for (const name of ALLOWED) t.equal(byName.get(name)?.stdout, `${name} ok`, `${name} still works`);
  for (const name of KILLED) {
    if (kernelServes(name))
      t.equal(byName.get(name)?.signal, 'SIGSYS', `${name}: foreign syscall ABI kills the process`);
    else
      t.not(
        byName.get(name)?.signal ?? null,
        null,
        `${name}: the kernel has no entry for this ABI, and the call does not run filtered either`,
      );
  }
  for (const name of NO_RING) t.equal(byName.get(name)?.stdout, `${name} errno=${EBADF}`, `${name}: no ring to enter`);
});
