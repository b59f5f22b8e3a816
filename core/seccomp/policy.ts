/**
 * The worker's default seccomp policy: a data table (every entry says why) compiled to
 * classic BPF by `compilePolicy`. docs/seccomp-policy.md explains the decisions.
 *
 * Shape of the compiled program:
 *   load arch; not x86_64 -> KILL_PROCESS
 *   load nr; x32 bit set  -> KILL_PROCESS
 *   per entry: nr matches -> (optional argument check on the LOW 32 bits) -> action / ALLOW
 *   ALLOW
 * Arguments are compared on their low 32-bit word only because every argument checked here
 * is an `int`/`unsigned int` in the kernel (ioctl cmd, socket domain, personality, legacy
 * clone flags go through lower_32_bits()): the kernel ignores the high word, so a filter that
 * compared all 64 bits could be bypassed by setting high bits (0x1_0000_5412 is TIOCSTI).
 */
import { AF_PACKET, AF_VSOCK, ENOSYS, EPERM } from '../linux-abi.js';
import { fail, ok, type Result } from '../result.js';
import { assemble, jeq, jset, label, load, NEXT, ret, serialise, type Instruction } from './bpf.js';
import { SYSCALLS_X86_64, type SyscallName } from './syscalls-x86_64.js';

const AUDIT_ARCH_X86_64 = 0xc000003e;
const X32_SYSCALL_BIT = 0x40000000;

const SECCOMP_RET_KILL_PROCESS = 0x80000000;
const SECCOMP_RET_ERRNO = 0x00050000;
const SECCOMP_RET_ALLOW = 0x7fff0000;

const SECCOMP_DATA_NR = 0;
const SECCOMP_DATA_ARCH = 4;
/** Low word of args[i] on a little-endian machine. */
const argLowWord = (index: ArgIndex): number => 16 + 8 * index;

type ArgIndex = 0 | 1 | 2 | 3 | 4 | 5;
type Action = 'eperm' | 'enosys';

/** When the action applies; without a condition it applies to every call of the syscall. */
type ArgCondition =
  | { arg: ArgIndex; anyBitOf: number }
  | { arg: ArgIndex; oneOf: readonly number[] }
  | { arg: ArgIndex; noneOf: readonly number[] };

export interface PolicyEntry {
  syscall: SyscallName;
  action: Action;
  when?: ArgCondition;
  why: string;
}

const CLONE_NEWNS = 0x00020000;
const CLONE_NEWCGROUP = 0x02000000;
const CLONE_NEWUTS = 0x04000000;
const CLONE_NEWIPC = 0x08000000;
const CLONE_NEWUSER = 0x10000000;
const CLONE_NEWPID = 0x20000000;
const CLONE_NEWNET = 0x40000000;
/**
 * CLONE_NEWTIME (0x80) is absent on purpose: in legacy clone() that bit is part of CSIGNAL
 * (the exit signal) and the kernel strips it from the flags, so clone() cannot create a time
 * namespace; only clone3 (ENOSYS here) and unshare (EPERM here) can.
 */
const CLONE_NAMESPACE_FLAGS =
  CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;

const TIOCSTI = 0x5412;
const TIOCLINUX = 0x541c;
const PER_LINUX = 0x0000;
const PERSONALITY_QUERY = 0xffffffff;

const deny = (syscall: SyscallName, why: string): PolicyEntry => ({ syscall, action: 'eperm', why });

export const DEFAULT_POLICY: readonly PolicyEntry[] = [
  deny('ptrace', 'reads and writes other processes of the same uid (the worker itself, sibling commands)'),
  deny('process_vm_readv', "reads another process's memory without ptrace"),
  deny('process_vm_writev', "writes another process's memory without ptrace"),
  deny('pidfd_getfd', "copies another process's fds (the worker's io_uring, its protocol socket) without ptrace"),
  deny('keyctl', 'the kernel keyring is not namespaced: keys of the uid outlive and escape the turn'),
  deny('add_key', 'kernel keyring, as keyctl'),
  deny('request_key', "kernel keyring, as keyctl; can also call out to the host's /sbin/request-key"),
  deny('bpf', 'large kernel attack surface; no turn needs to load BPF programs or maps'),
  deny('perf_event_open', 'large kernel attack surface and a side channel on other processes'),
  deny('userfaultfd', 'lets an exploit stall the kernel at a chosen page fault to win races'),
  deny('io_uring_setup', 'io_uring bypasses per-syscall seccomp checks and is a large attack surface'),
  // io_uring_enter stays allowed: a Node linked against libuv >= 1.45 (Debian 13's nodejs)
  // creates its rings before the filter and drives its event loop through them. Without
  // io_uring_setup the command cannot create a ring, rings are close-on-exec, and
  // pidfd_getfd (below) is denied, so the command never holds one to enter.
  deny('io_uring_register', 'io_uring, as io_uring_setup'),
  deny('kexec_load', 'replaces the running kernel'),
  deny('kexec_file_load', 'replaces the running kernel'),
  deny('init_module', 'loads kernel code'),
  deny('finit_module', 'loads kernel code'),
  deny('delete_module', 'unloads kernel code'),
  deny('mount', 'changes the filesystem view the helper built'),
  deny('umount2', 'uncovers what the filesystem view masks'),
  deny('open_tree', 'new mount API: clones mounts, a way around mount(2)'),
  deny('open_tree_attr', 'new mount API: open_tree with attribute changes'),
  deny('move_mount', 'new mount API: attaches mounts'),
  deny('fsopen', 'new mount API: creates filesystem contexts'),
  deny('fsconfig', 'new mount API: configures filesystem contexts'),
  deny('fsmount', 'new mount API: creates mounts'),
  deny('fspick', 'new mount API: reconfigures existing mounts'),
  deny('mount_setattr', 'new mount API: changes mount flags such as read-only'),
  deny('pivot_root', 'changes the root of the filesystem view'),
  deny('chroot', 'changes the root; classic confusion attacks on setuid programs and on fd-relative paths'),
  deny('unshare', 'new namespaces (user namespaces above all) give capabilities over fresh kernel objects'),
  deny('setns', 'joins other namespaces through inherited or /proc fds'),
  {
    syscall: 'clone',
    action: 'eperm',
    when: { arg: 0, anyBitOf: CLONE_NAMESPACE_FLAGS },
    why: 'plain fork/thread creation is needed; clone with a namespace flag is unshare by another name',
  },
  {
    syscall: 'clone3',
    action: 'enosys',
    why: 'its flags live in a struct in memory that seccomp cannot read; ENOSYS makes libc fall back to clone, whose flags are checked',
  },
  {
    syscall: 'ioctl',
    action: 'eperm',
    when: { arg: 1, oneOf: [TIOCSTI, TIOCLINUX] },
    why: 'TIOCSTI fakes terminal input, TIOCLINUX reads/pastes the console selection: both type into the terminal of whoever shares it',
  },
  {
    syscall: 'personality',
    action: 'eperm',
    when: { arg: 0, noneOf: [PER_LINUX, PERSONALITY_QUERY] },
    why: 'non-default personalities disable ASLR (ADDR_NO_RANDOMIZE), map page zero (MMAP_PAGE_ZERO) or change syscall semantics',
  },
  deny('acct', 'switches host process accounting'),
  deny('swapon', 'host swap configuration'),
  deny('swapoff', 'host swap configuration'),
  deny('reboot', 'host power state (and CAD behaviour)'),
  deny('clock_settime', 'the system clock is shared with the host'),
  deny('settimeofday', 'the system clock is shared with the host'),
  deny('clock_adjtime', 'adjusts the shared clock; reading the time needs no adjtime call'),
  deny(
    'adjtimex',
    'adjusts the shared clock; read-only use (modes 0) is denied too because its mode sits in memory seccomp cannot read',
  ),
  deny('syslog', "reads the kernel log, which leaks kernel addresses and other turns' activity"),
  deny('quotactl', 'host quota configuration'),
  deny('quotactl_fd', 'host quota configuration'),
  // The next six follow flatpak's blocklist (common/flatpak-run.c, setup_seccomp), which
  // Docker's default profile matches for the first three.
  deny('modify_ldt', '16-bit segments no turn needs, and a history of kernel information leaks and bugs'),
  deny(
    'move_pages',
    "moves pages of another process of the uid between NUMA nodes and reports where they lie (a side channel on the worker's memory)",
  ),
  deny('migrate_pages', 'moves every page of another process of the uid between NUMA nodes'),
  deny('mbind', 'NUMA placement: no turn needs it, and denying the family leaves no half-policy to reason about'),
  deny('set_mempolicy', 'NUMA placement, as mbind'),
  deny('get_mempolicy', 'NUMA placement, as mbind; also reveals the node a page of memory lies on'),
  deny('open_by_handle_at', 'opens files by handle, bypassing the path-based filesystem view (the "shocker" escape)'),
  {
    syscall: 'socket',
    action: 'eperm',
    when: { arg: 0, oneOf: [AF_PACKET, AF_VSOCK] },
    why: 'AF_PACKET is raw link-layer access (and a history of kernel bugs); AF_VSOCK talks to the hypervisor, outside the network namespace',
  },
];

function conditionValues(when: Exclude<ArgCondition, { anyBitOf: number }>): readonly number[] {
  return 'oneOf' in when ? when.oneOf : when.noneOf;
}

export function validatePolicy(policy: readonly PolicyEntry[]): Result<{}, 'invalid_policy'> {
  const seen = new Set<SyscallName>();
  for (const entry of policy) {
    if (seen.has(entry.syscall)) return fail('invalid_policy', `syscall ${entry.syscall} has more than one entry`);
    seen.add(entry.syscall);
    if (entry.why.trim() === '') return fail('invalid_policy', `syscall ${entry.syscall} has no reason`);
    if (entry.when && !('anyBitOf' in entry.when) && conditionValues(entry.when).length === 0) {
      return fail('invalid_policy', `syscall ${entry.syscall} has an empty argument condition`);
    }
  }
  return ok({});
}

function actionValue(action: Action): number {
  return SECCOMP_RET_ERRNO | (action === 'eperm' ? EPERM : ENOSYS);
}

/** Compares the loaded argument word; jumps to `matched` when the action applies. */
function conditionCheck(when: ArgCondition, matched: string, unmatched: string): Instruction[] {
  if ('anyBitOf' in when) return [jset(when.anyBitOf, matched, unmatched)];
  const values = conditionValues(when);
  const [onHit, onLastMiss] = 'oneOf' in when ? [matched, unmatched] : [unmatched, matched];
  return values.map((value, i) => jeq(value, onHit, i === values.length - 1 ? onLastMiss : NEXT));
}

function compileEntry(entry: PolicyEntry): Instruction[] {
  const nr = SYSCALLS_X86_64[entry.syscall];
  const next = `after_${entry.syscall}`;
  if (!entry.when) return [jeq(nr, NEXT, next), ret(actionValue(entry.action)), label(next)];
  const matched = `act_${entry.syscall}`;
  const unmatched = `allow_${entry.syscall}`;
  return [
    jeq(nr, NEXT, next),
    load(argLowWord(entry.when.arg)),
    ...conditionCheck(entry.when, matched, unmatched),
    label(matched),
    ret(actionValue(entry.action)),
    label(unmatched),
    ret(SECCOMP_RET_ALLOW),
    label(next),
  ];
}

export function policyProgram(policy: readonly PolicyEntry[]): Instruction[] {
  return [
    load(SECCOMP_DATA_ARCH),
    jeq(AUDIT_ARCH_X86_64, 'native_arch', NEXT),
    ret(SECCOMP_RET_KILL_PROCESS), // i386 via int 0x80 or any foreign ABI: an escape attempt
    label('native_arch'),
    load(SECCOMP_DATA_NR),
    jset(X32_SYSCALL_BIT, NEXT, 'native_abi'),
    ret(SECCOMP_RET_KILL_PROCESS), // x32 numbers alias the x86_64 table: an escape attempt
    label('native_abi'),
    ...policy.flatMap(compileEntry),
    ret(SECCOMP_RET_ALLOW),
  ];
}

export type CompileFailure = 'invalid_policy' | 'assemble_failed';

/** The policy as `struct sock_filter[]` bytes, ready for `struct sock_fprog`. */
export function compilePolicy(
  policy: readonly PolicyEntry[] = DEFAULT_POLICY,
): Result<{ program: Buffer; instructionCount: number }, CompileFailure> {
  const valid = validatePolicy(policy);
  if (!valid.ok) return valid;
  const assembled = assemble(policyProgram(policy));
  if (!assembled.ok) return fail('assemble_failed', `${assembled.reason}: ${assembled.detail}`);
  return ok({ program: serialise(assembled.filters), instructionCount: assembled.filters.length });
}
