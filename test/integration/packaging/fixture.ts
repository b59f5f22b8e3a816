/**
 * The package under test, shared by the packaging test files (they run in parallel): named by
 * TURNHOST_DEB, else dist/turnhost_<version>-1_<arch>.deb, rebuilt under a lock when it is
 * missing or older than any file it is made from (so the second file reuses the first's build).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const SOURCES = [
  'packaging',
  'core',
  'supervisor',
  'worker',
  'cgroup',
  'proxy',
  'identity-helper/src',
  'bin',
  'ui',
  'docs/operator.md',
  'package.json',
  'package-lock.json',
  'tsconfig.json',
];
const BUILD_LOCK = path.join(os.tmpdir(), 'turnhost-deb-build.lock');

function expectedDebPath(): string {
  const version = (JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string })
    .version;
  const arch = execFileSync('dpkg', ['--print-architecture'], { encoding: 'utf8' }).trim();
  return path.join(repoRoot, 'dist', `turnhost_${version}-1_${arch}.deb`);
}

/** The path of the package to test, building it first when needed. */
export function packageUnderTest(): string {
  const given = process.env['TURNHOST_DEB'];
  if (given !== undefined && given !== '') return path.resolve(given);
  const deb = expectedDebPath();
  const sources = SOURCES.map((source) => path.join(repoRoot, source));
  // "$1" is the deb, the rest are sources; fresh = exists and no source is newer.
  const buildUnlessFresh = `deb=$1; shift
    if [ -f "$deb" ] && [ -z "$(find "$@" -newer "$deb" -print -quit 2>/dev/null)" ]; then exit 0; fi
    exec bash "${path.join(repoRoot, 'packaging/build-deb.sh')}"`;
  execFileSync('flock', [BUILD_LOCK, 'sh', '-c', buildUnlessFresh, 'sh', deb, ...sources], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  if (!fs.existsSync(deb)) throw new Error(`${deb} was not built`);
  return deb;
}
