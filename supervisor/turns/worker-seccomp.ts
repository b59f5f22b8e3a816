/**
 * The seccomp filter every worker installs, compiled here on the supervisor's side
 * (core/seccomp/, docs/seccomp-policy.md) and sent as the worker's first protocol message:
 * the worker only checks the program and installs it. The policy does not depend on the
 * turn, so it is compiled once.
 */
import { compilePolicy } from '../../core/seccomp/policy.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { SeccompMessage } from './worker-protocol.js';

type Compiled = Result<{ message: SeccompMessage }, 'seccomp_compile_failed'>;

let compiled: Compiled | undefined;

function compile(): Compiled {
  const program = compilePolicy();
  if (!program.ok) return fail('seccomp_compile_failed', `${program.reason}: ${program.detail}`);
  const message: SeccompMessage = { type: 'seccomp', program: program.program.toString('base64') };
  return ok({ message });
}

export function workerSeccompMessage(): Compiled {
  compiled ??= compile();
  return compiled;
}
