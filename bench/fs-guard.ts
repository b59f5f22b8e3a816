/**
 * fs guard write throughput for small files next to plain `fs.writeFileSync` of the same
 * files, measured in the same run. The guard fsyncs each file and its directory, so a second
 * baseline (writeFileSync + fsync of file and directory) separates the cost of durability
 * from the cost of the descriptor walk and identity checks.
 * Run: npx tsx bench/fs-guard.ts [files] [bytes] [parent dir, default os.tmpdir(); /dev/shm isolates CPU cost]
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { closeRoot, openRoot, writeFile } from '../supervisor/fs/guard.js';

const files = Number(process.argv[2] ?? 5000);
const size = Number(process.argv[3] ?? 1024);
const parent = process.argv[4] ?? os.tmpdir();
const data = Buffer.alloc(size, 0x61);
const rel = (i: number): string => `masks/turn-${i % 10}/file-${i}.bin`;

function timed(label: string, run: (dir: string) => void): number {
  const dir = fs.mkdtempSync(path.join(parent, 'bench-fs-guard-'));
  try {
    const start = process.hrtime.bigint();
    run(dir);
    const ms = Number(process.hrtime.bigint() - start) / 1e6;
    console.log(
      `${label.padEnd(34)} ${ms.toFixed(0).padStart(7)} ms  ${((files / ms) * 1000).toFixed(0).padStart(7)} files/s`,
    );
    return ms;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function plain(dir: string, durable: boolean): void {
  for (let i = 0; i < files; i++) {
    const file = path.join(dir, rel(i));
    fs.mkdirSync(path.dirname(file), { recursive: true });
    if (!durable) {
      fs.writeFileSync(file, data, { flag: 'wx' });
      continue;
    }
    const fd = fs.openSync(file, 'wx');
    fs.writeSync(fd, data);
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    const dirFd = fs.openSync(path.dirname(file), 'r');
    fs.fsyncSync(dirFd);
    fs.closeSync(dirFd);
  }
}

function guarded(dir: string): void {
  const root = openRoot(dir);
  if (!root.ok) throw new Error(root.detail);
  try {
    for (let i = 0; i < files; i++) {
      const written = writeFile(root, rel(i), data, { mode: 'create', maxBytes: size });
      if (!written.ok) throw new Error(`${rel(i)}: ${written.reason} ${written.detail}`);
    }
  } finally {
    closeRoot(root);
  }
}

console.log(`${files} files x ${size} bytes, create mode, two directory levels, in ${parent}`);
const baseline = timed('fs.writeFileSync', (dir) => plain(dir, false));
const durable = timed('fs.writeFileSync + fsync file/dir', (dir) => plain(dir, true));
const guard = timed('fs guard writeFile', guarded);
console.log(`ratio guard / writeFileSync:          ${(guard / baseline).toFixed(2)}x`);
console.log(`ratio guard / writeFileSync + fsync:  ${(guard / durable).toFixed(2)}x`);
