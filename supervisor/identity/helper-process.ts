/**
 * Running the identity helper (identity-helper/, protocol in docs/identity-helper-protocol.md):
 * where it is, how it is spawned (an empty environment, the descriptor on fd 3), what its exit
 * codes mean (identity-helper/src/failure.h) and how a short-lived operation's receipt reads.
 * The operations themselves live one family per module beside this one.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type net from 'node:net';
import { fail, ok, type Fail, type Result } from '../../core/result.js';
import { encodeDescriptor, HelperDescriptorError, type HelperDescriptor } from './helper-descriptor.js';

export interface HelperLocation {
  path: string;
  /** Passed as `--config PATH`; the helper honours it only for a real-uid-0 caller, or in shared mode. */
  configPath: string | null;
  /** Shared mode (`--shared`): workers keep the caller's own uid; the helper lends no privilege. */
  shared?: boolean;
  /**
   * Whom this supervisor's workspace leases are held for (separate uids): its instance's lease
   * owner (helper-owner.ts). The helper refuses a lease op or leased launch of another owner's.
   */
  owner?: string;
}

/** Exit codes of the helper, by stable reason. */
export const HELPER_EXIT_CODES = {
  usage: 64,
  descriptor_malformed: 65,
  descriptor_unknown: 66,
  caller_not_permitted: 67,
  uid_out_of_range: 68,
  cgroup_refused: 69,
  config_invalid: 70,
  namespace_failed: 71,
  identity_drop_failed: 72,
  exec_failed: 73,
  rlimit_refused: 74,
  probe_mismatch: 75,
  internal: 76,
  cwd_unusable: 77,
  view_refused: 78,
  uid_in_use: 80,
  lease_refused: 81,
  workspace_busy: 82,
  lease_owner_mismatch: 83,
} as const;

type HelperRefusalReason = keyof typeof HELPER_EXIT_CODES;
export type HelperFailureReason =
  | HelperRefusalReason
  | 'descriptor_invalid'
  | 'helper_unrunnable'
  | 'helper_signaled'
  | 'helper_exit_unknown'
  | 'helper_output_invalid';

const REASON_BY_EXIT_CODE = new Map<number, HelperRefusalReason>(
  Object.entries(HELPER_EXIT_CODES).map(([reason, code]) => [code, reason as HelperRefusalReason]),
);

/**
 * The typed refusal for a helper that exited with `exitCode` and printed `stderr`, or null
 * when the exit code is not one of the helper's (e.g. the worker's own exit after launch).
 */
export function parseHelperRefusal(exitCode: number | null, stderr: string): Fail<HelperFailureReason> | null {
  const reason = exitCode === null ? undefined : REASON_BY_EXIT_CODE.get(exitCode);
  if (reason === undefined) return null;
  const line = stderr.split('\n').find((candidate) => candidate.startsWith('identity-helper: '));
  return fail(reason, line?.slice('identity-helper: '.length) ?? `identity helper exited ${exitCode}`);
}

function helperArgs(helper: HelperLocation): string[] {
  const config = helper.configPath === null ? [] : ['--config', helper.configPath];
  return helper.shared === true ? ['--shared', ...config] : config;
}

/** One entry of the child's fds 0-2 (and 4 on): 'pipe', 'ignore' or an fd of ours to pass on. */
export type HelperStdio = 'pipe' | 'ignore' | number;

/**
 * Spawns the helper with an empty environment. `stdio` names fds 0-2 and any after fd 3; fd 3
 * is always the protocol socket (a unix socket Node creates for the 'pipe' entry), returned as
 * `protocol`, onto which the caller writes the descriptor.
 */
export function spawnHelper(
  helper: HelperLocation,
  stdio: readonly [HelperStdio, HelperStdio, HelperStdio],
  extraFds: readonly HelperStdio[] = [],
): { child: ChildProcess; protocol: net.Socket } {
  const child = spawn(helper.path, helperArgs(helper), { stdio: [...stdio, 'pipe', ...extraFds], env: {} });
  return { child, protocol: child.stdio[3] as net.Socket };
}

const MAX_OUTPUT_BYTES = 1 << 20;

interface HelperRun {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function collect(stream: NodeJS.ReadableStream | null, sink: Buffer[]): void {
  let size = 0;
  stream?.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size <= MAX_OUTPUT_BYTES) sink.push(chunk);
  });
}

/** Runs one short-lived helper operation (probe, view, kill) to completion. */
function runHelperOnce(helper: HelperLocation, descriptor: Buffer): Promise<Result<HelperRun, HelperFailureReason>> {
  return new Promise((resolve) => {
    const { child, protocol: socket } = spawnHelper(helper, ['ignore', 'pipe', 'pipe']);
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    collect(child.stdout, stdout);
    collect(child.stderr, stderr);
    child.on('error', (error) => resolve(fail('helper_unrunnable', `${helper.path}: ${error.message}`)));
    socket.on('error', () => undefined); // the helper may exit before reading: its exit code tells why
    socket.end(descriptor);
    child.on('close', (exitCode, signal) =>
      resolve(
        ok({
          exitCode,
          signal,
          stdout: Buffer.concat(stdout).toString('utf8'),
          stderr: Buffer.concat(stderr).toString('utf8'),
        }),
      ),
    );
  });
}

function outcomeFailure(run: HelperRun): Fail<HelperFailureReason> | null {
  if (run.signal !== null) return fail('helper_signaled', `identity helper killed by ${run.signal}`);
  if (run.exitCode === 0) return null;
  return (
    parseHelperRefusal(run.exitCode, run.stderr) ??
    fail('helper_exit_unknown', `identity helper exited ${run.exitCode}`)
  );
}

/** `key value` lines (value = rest of the line); the first occurrence of a key wins. */
export function parseReceipt(stdout: string): Record<string, string> {
  const receipt: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const space = line.indexOf(' ');
    if (space <= 0) continue;
    const key = line.slice(0, space);
    receipt[key] ??= line.slice(space + 1);
  }
  return receipt;
}

/**
 * Encodes `descriptor`, runs the helper to completion and answers its stdout, or the typed
 * failure: descriptor_invalid before spawning, else the helper's refusal by exit code.
 */
export async function runHelperOperation(
  helper: HelperLocation,
  descriptor: HelperDescriptor,
): Promise<Result<{ stdout: string }, HelperFailureReason>> {
  let bytes: Buffer;
  try {
    bytes = encodeDescriptor(descriptor);
  } catch (error) {
    if (error instanceof HelperDescriptorError) return fail('descriptor_invalid', error.message);
    throw error;
  }
  const run = await runHelperOnce(helper, bytes);
  if (!run.ok) return run;
  return outcomeFailure(run) ?? ok({ stdout: run.stdout });
}

/** A decimal of at most ten digits (a uid, a count of processes). */
export function decimalField(receipt: Record<string, string>, key: string): number | null {
  const text = receipt[key];
  return text !== undefined && /^(0|[1-9][0-9]{0,9})$/.test(text) ? Number(text) : null;
}

/** A count that may pass 2^32 (bytes), still a safe integer. */
export function countField(receipt: Record<string, string>, key: string): number | null {
  const text = receipt[key];
  return text !== undefined && /^(0|[1-9][0-9]{0,14})$/.test(text) ? Number(text) : null;
}
