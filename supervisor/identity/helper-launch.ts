/**
 * The helper's launch (identity-helper/src/launch.c): the only path that execs a worker. Unlike
 * the other operations the helper does not run to completion here; the caller keeps the child
 * and the protocol socket for the worker's whole life.
 */
import type { ChildProcess } from 'node:child_process';
import type net from 'node:net';
import { encodeDescriptor, type HelperLaunchDescriptor } from './helper-descriptor.js';
import { spawnHelper, type HelperLocation } from './helper-process.js';

/**
 * Starts the helper's launch: the descriptor goes onto fd 3 (a unix socket Node creates for the
 * 'pipe' entry), which stays open in the worker. The returned socket is where the caller
 * writes the worker's launch message next. Throws HelperDescriptorError before spawning.
 * A helper refusal shows as an exit code from HELPER_EXIT_CODES: use parseHelperRefusal.
 */
export function spawnHelperLaunch(
  helper: HelperLocation,
  descriptor: HelperLaunchDescriptor,
  options: { stdio?: 'pipe'; listenerChannelFd?: number } = {},
): { child: ChildProcess; protocol: net.Socket } {
  const bytes = encodeDescriptor({ ...descriptor, op: 'launch' });
  const stdio = options.stdio ?? 'pipe';
  // fd 4, the worker's listener channel (supervisor/turns/listener-channel.ts), when the helper starts the worker.
  const channel = options.listenerChannelFd === undefined ? [] : [options.listenerChannelFd];
  const { child, protocol } = spawnHelper(helper, [stdio, stdio, stdio], channel);
  protocol.write(bytes);
  return { child, protocol };
}
