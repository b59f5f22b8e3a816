/**
 * Software identity for status: `release` is the package version; `sourceCommit` comes from a
 * SOURCE_COMMIT file at the package root (written by the deb build), else from the checkout's
 * git HEAD, else "unknown".
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The directory holding turnhost's package.json, found upward from this module (works for tsx and dist/). */
export function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const candidate = path.join(dir, 'package.json');
    if (fs.existsSync(candidate)) {
      const name = (JSON.parse(fs.readFileSync(candidate, 'utf8')) as { name?: string }).name;
      if (name === 'turnhost') return dir;
    }
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('turnhost package.json not found above ' + fileURLToPath(import.meta.url));
    dir = parent;
  }
}

function sourceCommit(root: string): string {
  const file = path.join(root, 'SOURCE_COMMIT');
  if (fs.existsSync(file)) return fs.readFileSync(file, 'utf8').trim() || 'unknown';
  if (!fs.existsSync(path.join(root, '.git'))) return 'unknown';
  try {
    return execFileSync('git', ['-C', root, 'rev-parse', 'HEAD'], {
      encoding: 'utf8',
      timeout: 5000,
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return 'unknown';
  }
}

export function softwareIdentity(): { release: string; sourceCommit: string } {
  const root = packageRoot();
  const { version } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string };
  return { release: version, sourceCommit: sourceCommit(root) };
}
