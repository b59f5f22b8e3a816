/**
 * `turnhost workspace create|list|show|delete`: the workspace routes of a running supervisor
 * (docs/cli.md, docs/workspaces.md).
 */
import { apiRequest, expectOk, type Connection } from './client.js';
import { CliExit, EXIT } from './exit-codes.js';

export const WORKSPACE_ACTIONS = ['create', 'list', 'show', 'delete'] as const;

export interface WorkspaceCommand {
  action: string | undefined;
  id: string | undefined;
  session: string | undefined;
  cancel: boolean;
  json: boolean;
}

interface ShownWorkspace {
  id: string;
  sessionId: string | null;
  uid: number | null;
  turnsRunning: number;
  createdAt: string;
  lastUsedAt: string | null;
  bytes?: number | null;
  files?: number | null;
}

function line(w: ShownWorkspace): string {
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
  const id_ = encodeURIComponent(id ?? '');
  const show = (body: unknown, text: string): number => {
    print(command.json ? JSON.stringify(body, null, 2) + '\n' : text);
    return EXIT.ok;
  };
  switch (action) {
    case 'create': {
      const request = {
        ...(id === undefined ? {} : { id }),
        ...(command.session === undefined ? {} : { sessionId: command.session }),
      };
      const body = expectOk(await apiRequest(connection(), 'POST', '/api/workspaces', request), 'workspace create') as {
        workspace: ShownWorkspace;
      };
      return show(body, `${body.workspace.id}\n`);
    }
    case 'list': {
      const query = command.session === undefined ? '' : `?session=${encodeURIComponent(command.session)}`;
      const body = expectOk(await apiRequest(connection(), 'GET', `/api/workspaces${query}`), 'workspace list') as {
        workspaces: ShownWorkspace[];
      };
      return show(body, body.workspaces.map(line).join(''));
    }
    case 'show': {
      const body = expectOk(await apiRequest(connection(), 'GET', `/api/workspaces/${id_}`), 'workspace show') as {
        workspace: ShownWorkspace;
      };
      return show(body, line(body.workspace));
    }
    default: {
      const query = command.cancel ? '?cancel=1' : '';
      const response = await apiRequest(connection(), 'DELETE', `/api/workspaces/${id_}${query}`);
      if (response.status === 409) {
        const refusal = response.body as { error?: string; code?: string };
        throw new CliExit(
          EXIT.conflict,
          `turnhost: workspace delete: ${refusal.error ?? ''} (${refusal.code ?? '409'})`,
        );
      }
      const body = expectOk(response, 'workspace delete') as { bytesRemoved: number; filesRemoved: number };
      return show(body, `deleted ${id}: ${body.filesRemoved} files, ${body.bytesRemoved} bytes\n`);
    }
  }
}
