/**
 * tap's process-info plugin adds its `--import` hook to NODE_OPTIONS of every process spawned
 * from a test, even one given an explicit environment. A supervisor started from a test would
 * pass that to its workers, whose inherited-fd check then (rightly) refuses the hook's extra
 * fds. Operators never run under tap, so tests that start supervisors or workers remove it
 * again with a later process-on-spawn listener.
 */
interface SpawnHookState {
  listeners: Array<(options: { env: Record<string, string> }) => void>;
}

export function stopTapInjectingIntoChildren(): void {
  const state = (globalThis as Record<symbol, SpawnHookState | undefined>)[
    Symbol.for('process-on-spawn@*:singletonId')
  ];
  state?.listeners.push((options) => {
    options.env = Object.fromEntries(
      Object.entries(options.env).filter(([name]) => name !== 'NODE_OPTIONS' && !name.startsWith('_TAPJS_')),
    );
  });
}
