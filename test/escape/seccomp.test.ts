/**
 * Attack class: dangerous syscalls from inside the worker. The native worker installs the
 * filter the supervisor compiled, as in every turn, and its command runs test/native/try-syscall
 * for each denied call. The probes run as root, where the kernel itself would allow most of
 * them, and an unfiltered baseline run proves no probe answers EPERM without the filter.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { seccompMessage, startWorker, WORKER_HARDENED } from '../support/native-worker.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const probe = path.join(root, 'test/native/build/try-syscall');
/** Runs each probe named after the probe path; one line per probe: name, exit status, output. */
const PROBE_SCRIPT = [
  'grep -E "^(Seccomp|NoNewPrivs):" /proc/self/status',
  'probe=$1; shift',
  'for p; do out=$("$probe" "$p"); rc=$?; printf "%s\\t%s\\t%s\\n" "$p" "$rc" "$out"; done',
].join('\n');
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

/** A shell reports a child killed by signal N as status 128 + N. */
function probeResult(line: string): ProbeResult {
  const [name = '', status = '', stdout = ''] = line.split('\t');
  const code = Number(status);
  const signal =
    code > 128 ? (Object.entries(os.constants.signals).find(([, n]) => n === code - 128)?.[0] ?? null) : null;
  return { name, stdout, status: signal === null ? code : null, signal };
}

t.test('under the default filter, installed by the worker', async (t) => {
  const names = [...DENIED, 'clone3', ...ALLOWED, ...NO_RING, ...KILLED];
  const launch = {
    type: 'launch',
    v: 1,
    argv: ['/bin/sh', '-c', PROBE_SCRIPT, 'sh', probe, ...names],
    cwd: '/',
    env: { PATH: '/usr/bin:/bin' },
    tty: null,
    egress: false,
  };
  const worker = startWorker(launch, [], undefined, seccompMessage(), { binary: WORKER_HARDENED });
  await worker.next('ready');
  const exit = await worker.next('exit');
  t.equal(await worker.done, 0, 'the worker reports and exits 0');
  t.match(exit, { exitCode: 0 }, `the probe script ran (output: ${worker.stdout()})`);
  t.match(worker.stdout(), /^Seccomp:\s+2$/m, 'the command under the worker: Seccomp 2');
  t.match(worker.stdout(), /^NoNewPrivs:\s+1$/m, 'the command under the worker: NoNewPrivs 1');
  const results = worker
    .stdout()
    .split('\n')
    .filter((line) => line.includes('\t'))
    .map(probeResult);
  const byName = new Map(results.map((r) => [r.name, r]));
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
