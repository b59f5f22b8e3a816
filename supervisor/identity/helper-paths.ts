/**
 * The path forms the helper accepts (identity-helper/src/descriptor.c): canonical absolute paths
 * for view paths and the workspace, canonical relative ones for protected paths and `dir`.
 */
export const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;

export function isCanonicalAbsolutePath(path: string): boolean {
  if (!path.startsWith('/') || Buffer.byteLength(path) >= 4096) return false;
  if (path === '/') return true;
  return path
    .slice(1)
    .split('/')
    .every((component) => component !== '' && component !== '.' && component !== '..');
}

/** Canonical and relative, no control character: what the helper accepts as a protected path or a dir. */
export function isCanonicalRelativePath(path: string): boolean {
  return path !== '' && !path.startsWith('/') && !CONTROL_CHARS.test(path) && isCanonicalAbsolutePath(`/${path}`);
}
