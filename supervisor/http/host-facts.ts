/** Static host facts for `GET /api/status`, collected once at boot (they do not change while we run). */
import os from 'node:os';
import si from 'systeminformation';

export interface HostFacts {
  kernel: string;
  distro: string;
  cpus: number;
  memoryBytes: number;
}

export async function collectHostFacts(): Promise<HostFacts> {
  const [osInfo, mem] = await Promise.all([si.osInfo(), si.mem()]);
  const distro = [osInfo.distro, osInfo.release].filter((part) => part !== '' && part !== 'unknown').join(' ');
  return {
    kernel: osInfo.kernel || os.release(),
    distro: distro || os.type(),
    cpus: os.availableParallelism(),
    memoryBytes: mem.total || os.totalmem(),
  };
}
