/**
 * Entry of the kernel relay thread (started by kernel-relay.ts). Reads commands from its port
 * without an event loop (receiveMessageOnPort) whenever the wake eventfd fires, and posts one
 * report per ended tunnel. Seccomp filters and no_new_privs of the creating thread apply here too.
 */
import { receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import { SpliceLoop, type RelayCommand, type TunnelReport } from './splice-loop.js';

export type ThreadMessage =
  { type: 'ready' } | { type: 'ended'; report: TunnelReport } | { type: 'failed'; detail: string };

const { port, wakeFd } = workerData as { port: MessagePort; wakeFd: number };
const post = (message: ThreadMessage): void => port.postMessage(message);

try {
  const loop = new SpliceLoop(
    wakeFd,
    () => receiveMessageOnPort(port)?.message as RelayCommand | undefined,
    (report) => post({ type: 'ended', report }),
  );
  post({ type: 'ready' });
  loop.run();
} catch (error) {
  post({ type: 'failed', detail: (error as Error).message });
}
port.close();
