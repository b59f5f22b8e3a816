/**
 * The attack probe's launch path: the turn manager's own `create` and `attach`, exactly as an
 * API caller's turn (validation, the limits lowered only, the workspace claim, the view), and
 * the workspace service for the second workspace the cross-workspace case aims at. The probes
 * sit below both services, so this adapter lives with the API that already drives them.
 */
import { fail, ok, type Result } from '../../core/result.js';
import type { AttackHost, AttackTurnRequest, AttackTurnRun, AttackWorkspace } from '../probes/attack.js';
import type { TurnManager } from '../turns/types.js';
import type { TurnResult } from '../turns/types.js';
import type { WorkspaceService } from '../workspaces/service.js';

/** The session the attack's turns and workspaces are recorded under. */
const ATTACK_SESSION = 'turnhost-attack';

async function runAttackTurn(turns: TurnManager, request: AttackTurnRequest): Promise<Result<AttackTurnRun>> {
  const created = await turns.create({
    sessionId: ATTACK_SESSION,
    mode: request.mode,
    argv: request.argv,
    ...('workspace' in request.place ? { workspace: request.place.workspace, cwd: '.' } : { cwd: request.place.cwd }),
    limits: request.limits,
    timeoutSeconds: request.timeoutSeconds,
  });
  if (!created.ok) return fail(created.reason, created.detail);
  const attached = turns.attach(created.turn.id);
  if (!attached.ok) return fail(attached.reason, attached.detail);
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  // The attach replays what was kept and then follows live: its exit comes after every byte.
  const result = await new Promise<TurnResult>((resolve) =>
    attached.attachment.onEvent((event) => {
      if (event.type === 'output') (event.stream === 'stderr' ? stderr : stdout).push(event.data);
      if (event.type === 'exit') resolve(event.result);
    }),
  );
  return ok({
    stdout: Buffer.concat(stdout).toString(),
    stderr: Buffer.concat(stderr).toString(),
    status: result.status,
    endedByMemory: result.status === 'oom_killed' || result.limitHits.includes('memory_oom'),
    ...(result.detail === undefined ? {} : { detail: result.detail }),
  });
}

async function createAttackWorkspace(workspaces: WorkspaceService): Promise<Result<AttackWorkspace>> {
  const created = await workspaces.create({ sessionId: ATTACK_SESSION });
  if (!created.ok) return fail(created.reason, created.detail);
  return ok({ id: created.workspace.id, dir: created.workspace.path });
}

/** The attack's workspaces: made for one run in the attack's session, deleted after it. */
class AttackWorkspaces {
  constructor(private readonly workspaces: WorkspaceService) {}

  create(): Promise<Result<AttackWorkspace>> {
    return createAttackWorkspace(this.workspaces);
  }

  async remove(id: string): Promise<void> {
    await this.workspaces.delete(id, { cancel: true });
  }
}

export class TurnManagerAttackHost implements AttackHost {
  readonly workspaces?: AttackWorkspaces;

  /** `workspaces` only when workspaces are configured (workspaces.root set). */
  constructor(
    private readonly turns: TurnManager,
    workspaces: WorkspaceService | undefined,
  ) {
    if (workspaces !== undefined) this.workspaces = new AttackWorkspaces(workspaces);
  }

  runTurn(request: AttackTurnRequest): Promise<Result<AttackTurnRun>> {
    return runAttackTurn(this.turns, request);
  }
}
