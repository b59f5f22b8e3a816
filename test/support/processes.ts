import fs from 'node:fs';

/** Live processes of a uid. A zombie has already died (it holds no memory, runs nothing) and waits only for its reaper. */
export function processesOfUid(uid: number): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const status = fs.readFileSync(`/proc/${entry}/status`, 'utf8');
      const real = /^Uid:\s+(\d+)/m.exec(status)?.[1];
      const zombie = /^State:\s+Z/m.test(status);
      if (Number(real) === uid && !zombie) pids.push(Number(entry));
    } catch {
      // exited while we looked
    }
  }
  return pids;
}
