import fs from 'node:fs';

export interface LiveProcess {
  pid: number;
  /** Real uid. */
  uid: number;
  /** The innermost pid: 1 for a turn's init, 2 for its worker, the host pid otherwise. */
  innermostPid: number;
}

/** Live processes. A zombie has already died (it holds no memory, runs nothing) and waits only for its reaper. */
export function liveProcesses(): LiveProcess[] {
  const found: LiveProcess[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const status = fs.readFileSync(`/proc/${entry}/status`, 'utf8');
      const real = /^Uid:\s+(\d+)/m.exec(status)?.[1];
      const innermost = /^NSpid:.*?(\d+)\s*$/m.exec(status)?.[1];
      if (real !== undefined && !/^State:\s+Z/m.test(status))
        found.push({ pid: Number(entry), uid: Number(real), innermostPid: Number(innermost ?? entry) });
    } catch {
      // exited while we looked
    }
  }
  return found;
}

/** Live processes of a uid. */
export function processesOfUid(uid: number): number[] {
  return liveProcesses()
    .filter((p) => p.uid === uid)
    .map((p) => p.pid);
}
