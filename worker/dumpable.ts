/**
 * The worker must be out of its command's reach: both run as the worker uid, and without Yama
 * any process of a uid may open /proc/<pid>/mem (read-write), fd/ and environ of another
 * dumpable process of that uid, seccomp's ptrace denial notwithstanding (the kernel checks
 * ptrace access, not the syscall). Not dumpable, /proc/<worker>/* belongs to root: the command
 * can neither write the worker's memory (and forge its exit report) nor take its protocol fd.
 * An exec makes a process dumpable again, so the worker does this itself, before any command.
 */
import { errnoName, lastErrno, PR_GET_DUMPABLE, PR_SET_DUMPABLE, prctl } from '../core/linux-abi.js';
import { fail, ok, type Result } from '../core/result.js';

export function makeUndumpable(): Result<{}, 'prctl_failed'> {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) !== 0)
    return fail('prctl_failed', `PR_SET_DUMPABLE: ${errnoName(lastErrno())}`);
  if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) !== 0) return fail('prctl_failed', 'the worker is still dumpable');
  return ok({});
}
