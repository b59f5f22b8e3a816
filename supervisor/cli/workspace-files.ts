/**
 * `turnhost workspace files ls|get|put|rm|mkdir|push|pull ID [PATH] [LOCAL]`: the workspace file
 * and archive routes of a running supervisor (docs/cli.md, docs/workspaces.md "Files from the
 * host"). push and pull move a directory as a tar archive.
 */
import fs from 'node:fs';
import { call, type Connection } from './client.js';
import { CliExit, EXIT } from './exit-codes.js';

const FILES_ACTIONS = ['ls', 'get', 'put', 'rm', 'mkdir', 'push', 'pull'] as const;

export interface FilesCommand {
  action: string | undefined;
  id: string | undefined;
  /** The path in the workspace (ls: default its top). */
  remote: string | undefined;
  /** get, pull: where to write (default stdout); put, push: what to send (`-` or absent: stdin). */
  local: string | undefined;
  recursive: boolean;
  json: boolean;
}

interface FilesIo {
  print: (text: string) => void;
  writeBytes: (data: Buffer) => void;
  readInput: () => Buffer;
}

/** Runs one files action; `usage` builds the usage error of this command. */
export async function workspaceFilesCommand(
  connection: () => Connection,
  command: FilesCommand,
  usage: (message: string) => CliExit,
  io: FilesIo,
): Promise<number> {
  const { action, id, remote, local } = command;
  if (action === undefined || !(FILES_ACTIONS as readonly string[]).includes(action))
    throw usage(`workspace files: expected one of ${FILES_ACTIONS.join(', ')}`);
  if (id === undefined) throw usage(`workspace files ${action}: missing the workspace id`);
  if (remote === undefined && action !== 'ls' && action !== 'pull')
    throw usage(`workspace files ${action}: missing the path`);
  if (local !== undefined && !['get', 'put', 'push', 'pull'].includes(action))
    throw usage(`workspace files ${action}: unexpected ${local}`);
  if (command.recursive && action !== 'rm') throw usage('--recursive applies to workspace files rm only');
  const what = `workspace files ${action}`;
  const show = (body: unknown, text: string): number => {
    io.print(command.json ? JSON.stringify(body, null, 2) + '\n' : text);
    return EXIT.ok;
  };
  const rel = remote ?? '';
  switch (action) {
    case 'ls':
    case 'get': {
      const read = await call(connection(), what, (client) => client.readWorkspaceFile(id, rel));
      if (read.kind === 'directory') {
        if (action === 'get') throw usage(`workspace files get: ${rel || '.'} is a directory (ls lists it)`);
        const lines = read.entries.map(
          (e) =>
            `${e.type.padEnd(9)} ${e.mode.toString(8).padStart(4, '0')} ${String(e.size).padStart(10)} ${e.mtime} ${e.name}\n`,
        );
        return show({ entries: read.entries }, lines.join(''));
      }
      if (action === 'ls') return show({ path: rel, sha256: read.sha256, size: read.data.length }, `file ${rel}\n`);
      if (local === undefined || local === '-') io.writeBytes(read.data);
      else fs.writeFileSync(local, read.data);
      return EXIT.ok;
    }
    case 'put': {
      const data = local === undefined || local === '-' ? io.readInput() : fs.readFileSync(local);
      const written = await call(connection(), what, (client) => client.writeWorkspaceFile(id, { path: rel }, data));
      return show(written, `${written.replaced ? 'replaced' : 'created'} ${rel}: ${written.bytes} bytes\n`);
    }
    case 'push': {
      const tar = local === undefined || local === '-' ? io.readInput() : fs.readFileSync(local);
      const extracted = await call(connection(), what, (client) => client.putArchive(id, rel, tar));
      const { files, directories, bytes } = extracted;
      return show(extracted, `extracted into ${rel}: ${files} files, ${directories} new directories, ${bytes} bytes\n`);
    }
    case 'pull': {
      const tar = await call(connection(), what, (client) => client.getArchive(id, rel || '.'));
      if (local === undefined || local === '-') io.writeBytes(tar);
      else fs.writeFileSync(local, tar);
      return EXIT.ok;
    }
    case 'rm': {
      const removed = await call(connection(), what, (client) =>
        client.deleteWorkspaceFile(id, rel, { recursive: command.recursive }),
      );
      return show(removed, `removed ${rel}: ${removed.files} files, ${removed.directories} directories\n`);
    }
    default: {
      const made = await call(connection(), what, (client) => client.makeWorkspaceDirectory(id, rel));
      return show(made, made.made > 0 ? `made ${rel}\n` : `${rel} exists\n`);
    }
  }
}
