/**
 * getrusage(RUSAGE_CHILDREN) through koffi: the usage of every child this process has
 * reaped (and the descendants they reaped). The worker reaps exactly one child, the command,
 * so read it after the command's exit has been observed.
 */
import { errnoName, lastErrno, libcFunction, RUSAGE_CHILDREN } from '../core/linux-abi.js';
import { fail, ok, type Result } from '../core/result.js';
import type { Rusage } from './protocol.js';

/** sizeof(struct rusage) on x86_64: two struct timeval then 14 longs. */
const RUSAGE_SIZE = 144;
const RU_UTIME = 0;
const RU_STIME = 16;
const RU_MAXRSS = 32;

function timevalUsec(buf: Buffer, at: number): number {
  return Number(buf.readBigInt64LE(at)) * 1_000_000 + Number(buf.readBigInt64LE(at + 8));
}

export function childrenRusage(): Result<{ rusage: Rusage }, 'getrusage_failed'> {
  const getrusage = libcFunction('int getrusage(int, _Out_ void *)') as (who: number, usage: Buffer) => number;
  const buf = Buffer.alloc(RUSAGE_SIZE);
  if (getrusage(RUSAGE_CHILDREN, buf) !== 0) return fail('getrusage_failed', `getrusage: ${errnoName(lastErrno())}`);
  return ok({
    rusage: {
      userCpuUsec: timevalUsec(buf, RU_UTIME),
      systemCpuUsec: timevalUsec(buf, RU_STIME),
      // Linux reports ru_maxrss in KiB.
      maxRssKiB: Number(buf.readBigInt64LE(RU_MAXRSS)),
    },
  });
}
