/**
 * The one place the identifier rules live. Turn, workspace and lease ids name cgroup leaves,
 * directories and lock files, so they are short and path-safe; session ids are chosen by the
 * host application and may carry its own separators. The schema, the supervisor, the cgroup
 * mechanism and the CLI all check against these, so a rule cannot drift between them.
 *
 * This module imports nothing: a mechanism may use it without loading the schema library.
 */

/** Turn, workspace and lease ids. */
export const ID_PATTERN = '^[A-Za-z0-9_-]{1,64}$';
/** What a valid id is, in words, for refusals that name the kind of id. */
export const ID_SHAPE = '1-64 characters of [A-Za-z0-9_-]';
export const ID_DETAIL = `expected ${ID_SHAPE}`;
const ID_RULE = new RegExp(ID_PATTERN);

/** Session ids. */
const SESSION_ID_MAX_LENGTH = 128;
export const SESSION_ID_PATTERN = `^[A-Za-z0-9_.:-]{1,${SESSION_ID_MAX_LENGTH}}$`;
export const SESSION_ID_DETAIL = `expected 1-${SESSION_ID_MAX_LENGTH} characters of [A-Za-z0-9_.:-]`;
const SESSION_ID_RULE = new RegExp(SESSION_ID_PATTERN);

export function isValidId(value: string): boolean {
  return ID_RULE.test(value);
}

export function isValidSessionId(value: string): boolean {
  return SESSION_ID_RULE.test(value);
}
