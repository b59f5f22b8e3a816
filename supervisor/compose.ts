/**
 * The turn manager and the workspace service, wired to each other. They are siblings: the
 * manager needs of the workspaces only what `TurnWorkspaces` names (claim one for a turn, its
 * usage, a session's workspaces), the service needs of the turns only what `WorkspaceTurns`
 * names (which run on a workspace, cancel one and wait). Neither imports the other; this is the
 * one place both are built, for `serve`, `run --local` and the tests that run real turns.
 */
import { fail, ok, type Result } from '../core/result.js';
import { leaseOwner } from './identity/helper-owner.js';
import { probeMode, type ProbeContext } from './probes/index.js';
import { TurnManager } from './turns/manager.js';
import type { TurnManagerDeps } from './turns/types.js';
import { helperLocation } from './turns/worker-process.js';
import { WorkspaceService } from './workspaces/service.js';

export interface TurnServices {
  turns: TurnManager;
  workspaces: WorkspaceService;
}

/**
 * Only where the helper's search for a workspace uid starts: the first uid of the range the
 * probe verified, probed once and then remembered. The helper itself decides which uid is free.
 */
function verifiedUidSearchStart(probeContext: ProbeContext): () => Promise<Result<{ uid: number }>> {
  let first: number | null = null;
  return async () => {
    if (first !== null) return ok({ uid: first });
    const probe = await probeMode(probeContext, 'ordinary', 'check');
    if (probe.uidRange) first = probe.uidRange.first;
    return probe.uidRange
      ? ok({ uid: probe.uidRange.first })
      : fail(
          'uid_range_unverified',
          probe.availability.requirement ?? 'the identity helper gave no verified uid range',
        );
  };
}

/**
 * Builds the workspace service, then the turn manager on it (which settles what a crash left
 * before any turn starts). Until the manager exists no turn runs, so the service sees none.
 */
export async function composeTurnServices(deps: TurnManagerDeps): Promise<TurnServices> {
  // A supervisor with a helper leases workspaces as its instance's owner: no owner, no start.
  if (deps.config.identityHelper.path) {
    const owner = leaseOwner(deps.config.dataDir);
    if (!owner.ok) throw new Error(`the instance's lease owner: ${owner.detail}`);
  }
  let turns: TurnManager | null = null;
  const workspaces = new WorkspaceService({
    config: () => deps.config,
    db: deps.db,
    events: deps.events,
    logger: deps.logger,
    helper: () => helperLocation(deps.config),
    uidSearchStart: verifiedUidSearchStart(deps.probeContext),
    turns: {
      running: (workspaceId) => turns?.turnsOnWorkspace(workspaceId) ?? [],
      cancelAndWait: (turnId) => turns?.cancelAndWait(turnId) ?? Promise.resolve(),
    },
  });
  turns = await TurnManager.start(deps, workspaces);
  return { turns, workspaces };
}
