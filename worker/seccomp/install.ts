/**
 * Loads a compiled seccomp program into this process through koffi:
 * prctl(PR_SET_NO_NEW_PRIVS) first (required for an unprivileged filter, and it keeps
 * setuid binaries from elevating), then seccomp(SET_MODE_FILTER, TSYNC) so every existing
 * Node thread is filtered too, then a check in /proc that every task reports `Seccomp: 2`.
 */
import fs from 'node:fs';
import koffi from 'koffi';
import {
  errnoName,
  lastErrno,
  prctl,
  PR_SET_NO_NEW_PRIVS,
  SECCOMP_FILTER_FLAG_TSYNC,
  SECCOMP_SET_MODE_FILTER,
  syscall,
  SYS_SECCOMP,
} from '../../core/linux-abi.js';
import { fail, ok, type Result } from '../../core/result.js';
import { SOCK_FILTER_SIZE } from '../../core/seccomp/bpf.js';

const SECCOMP_MODE_FILTER = '2';

export type InstallFailure = 'invalid_program' | 'no_new_privs_failed' | 'seccomp_failed' | 'verify_failed';

let sockFprogDeclared = false;

/** `struct sock_fprog`, declared to koffi once: a second declaration of the name would throw. */
function declareSockFprog(): void {
  if (sockFprogDeclared) return;
  koffi.struct('turnhost_sock_fprog', { len: 'uint16_t', filter: 'void *' });
  sockFprogDeclared = true;
}

export function installSeccompFilter(
  program: Buffer,
): Result<{ instructionCount: number; tasks: number }, InstallFailure> {
  const count = program.length / SOCK_FILTER_SIZE;
  if (!Number.isInteger(count) || count < 1 || count > 0xffff) {
    return fail('invalid_program', `program of ${program.length} bytes is not 1..65535 sock_filter entries`);
  }
  declareSockFprog();
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) !== 0) {
    return fail('no_new_privs_failed', `prctl(PR_SET_NO_NEW_PRIVS): ${errnoName(lastErrno())}`);
  }
  const result = Number(
    syscall(
      SYS_SECCOMP,
      'unsigned int',
      SECCOMP_SET_MODE_FILTER,
      'unsigned int',
      SECCOMP_FILTER_FLAG_TSYNC,
      'turnhost_sock_fprog *',
      { len: count, filter: program },
    ),
  );
  // With TSYNC a positive return is the id of a thread that could not be synchronised.
  if (result !== 0) {
    const detail = result > 0 ? `thread ${result} could not be synchronised` : errnoName(lastErrno());
    return fail('seccomp_failed', `seccomp(SET_MODE_FILTER, TSYNC): ${detail}`);
  }
  const verified = verifySeccompOnAllTasks();
  if (!verified.ok) return verified;
  return ok({ instructionCount: count, tasks: verified.tasks });
}

function statusField(status: string, name: string): string | undefined {
  const line = status.split('\n').find((l) => l.startsWith(`${name}:`));
  return line?.slice(name.length + 1).trim();
}

/** Every thread of this process must be in filter mode with no_new_privs set. */
function verifySeccompOnAllTasks(): Result<{ tasks: number }, 'verify_failed'> {
  let tids: string[];
  try {
    tids = fs.readdirSync('/proc/self/task');
  } catch (err) {
    return fail('verify_failed', `cannot list /proc/self/task: ${(err as Error).message}`);
  }
  for (const tid of tids) {
    let status: string;
    try {
      status = fs.readFileSync(`/proc/self/task/${tid}/status`, 'utf8');
    } catch (err) {
      // A thread that exited between readdir and read cannot run unfiltered code.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      return fail('verify_failed', `cannot read status of task ${tid}: ${(err as Error).message}`);
    }
    if (statusField(status, 'Seccomp') !== SECCOMP_MODE_FILTER) {
      return fail('verify_failed', `task ${tid} reports Seccomp: ${statusField(status, 'Seccomp') ?? 'missing'}`);
    }
    if (statusField(status, 'NoNewPrivs') !== '1') {
      return fail('verify_failed', `task ${tid} reports NoNewPrivs: ${statusField(status, 'NoNewPrivs') ?? 'missing'}`);
    }
  }
  return ok({ tasks: tids.length });
}
