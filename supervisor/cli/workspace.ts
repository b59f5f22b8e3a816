/**
 * `turnhost workspace create|list|show|delete`: the workspace routes of a running supervisor
 * (docs/cli.md, docs/workspaces.md).
 */
import type { Workspace } from '../../client/index.js';
import { call, type Connection } from './client.js';
import { CliExit, EXIT } from './exit-codes.js';

export const WORKSPACE_ACTIONS = ['create', 'list', 'show', 'delete'] as const;

export interface WorkspaceCommand {
  action: string | undefined;
  id: string | undefined;
  session: string | undefined;
  cancel: boolean;
  json: boolean;
}

function line(w: Workspace): string {
  const usage = w.bytes === undefined ? '' : `  bytes ${w.bytes ?? '-'}  files ${w.files ?? '-'}`;
  return `${w.id}  uid ${w.uid ?? 'shared'}  session ${w.sessionId ?? '-'}  turns ${w.turnsRunning}  created ${w.createdAt}  used ${w.lastUsedAt ?? '-'}${usage}\n`;
}

/** Runs one workspace action; `usage` builds the usage error of this command. */
export async function workspaceCommand(
  connection: () => Connection,
  command: WorkspaceCommand,
  usage: (message: string) => CliExit,
  print: (text: string) => void,
): Promise<number> {
  const { action, id } = command;
  const needsId = action === 'show' || action === 'delete';
  if (action === undefined || !(WORKSPACE_ACTIONS as readonly string[]).includes(action))
    throw usage(`workspace: expected one of ${WORKSPACE_ACTIONS.join(', ')}`);
  if (needsId && id === undefined) throw usage(`workspace ${action}: missing the workspace id`);
  if (!needsId && action !== 'create' && id !== undefined) throw usage(`workspace ${action}: takes no id`);
  if (command.cancel && action !== 'delete') throw usage('--cancel applies to workspace delete only');
  const show = (body: unknown, text: string): number => {
    print(command.json ? JSON.stringify(body, null, 2) + '\n' : text);
    return EXIT.ok;
  };
  const what = `workspace ${action}`;
  switch (action) {
    case 'create': {
      const request = {
        ...(id === undefined ? {} : { id }),
        ...(command.session === undefined ? {} : { sessionId: command.session }),
      };
      const workspace = await call(connection(), what, (client) => client.createWorkspace(request));
      return show({ workspace }, `${workspace.id}\n`);
    }
    case 'list': {
      const session = command.session;
      const workspaces = await call(connection(), what, (client) =>
        client.listWorkspaces(session === undefined ? {} : { session }),
      );
      return show({ workspaces }, workspaces.map(line).join(''));
    }
    case 'show': {
      const workspace = await call(connection(), what, (client) => client.getWorkspace(id!));
      return show({ workspace }, line(workspace));
    }
    default: {
      const deleted = await call(connection(), what, (client) =>
        client.deleteWorkspace(id!, { cancel: command.cancel }),
      );
      return show(deleted, `deleted ${id}: ${deleted.filesRemoved} files, ${deleted.bytesRemoved} bytes\n`);
    }
  }
}
