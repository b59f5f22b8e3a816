/** Workspaces: a directory that outlives turns, and the worker uid leased to it (docs/workspaces.md). */
import { Type, type Static } from '@sinclair/typebox';
import { ID_DETAIL, ID_PATTERN, SESSION_ID_DETAIL, SESSION_ID_PATTERN } from './ids.js';

export const WorkspaceCreateRequest = Type.Object(
  {
    sessionId: Type.Optional(
      Type.String({
        pattern: SESSION_ID_PATTERN,
        'x-detail': SESSION_ID_DETAIL,
        description: 'Binds the workspace to this session: deleting the session deletes it.',
      }),
    ),
    id: Type.Optional(
      Type.String({
        pattern: ID_PATTERN,
        'x-detail': ID_DETAIL,
        description: 'Generated when absent.',
      }),
    ),
  },
  {
    title: 'WorkspaceCreateRequest',
    additionalProperties: false,
    'x-detail': 'expected a JSON object',
    'x-unknown': 'unknown field',
  },
);
export type WorkspaceCreateRequest = Static<typeof WorkspaceCreateRequest>;

const Count = Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]);

export const Workspace = Type.Object(
  {
    id: Type.String(),
    sessionId: Type.Union([Type.String(), Type.Null()]),
    uid: Type.Union([Type.Integer(), Type.Null()], { description: 'The leased uid; null in shared_uid mode.' }),
    identity: Type.Union([Type.Literal('separate_uid'), Type.Literal('shared_uid')]),
    turnsRunning: Type.Integer({ minimum: 0 }),
    createdAt: Type.String(),
    lastUsedAt: Type.Union([Type.String(), Type.Null()]),
    bytes: Type.Optional(Count),
    files: Type.Optional(Count),
  },
  { title: 'Workspace', description: 'bytes and files: on GET of one workspace; null when they cannot be measured.' },
);
export type Workspace = Static<typeof Workspace>;

export const WorkspaceAnswer = Type.Object({ workspace: Workspace }, { title: 'WorkspaceAnswer' });
export type WorkspaceAnswer = Static<typeof WorkspaceAnswer>;

export const WorkspaceList = Type.Object({ workspaces: Type.Array(Workspace) }, { title: 'WorkspaceList' });
export type WorkspaceList = Static<typeof WorkspaceList>;

export const WorkspaceDeletion = Type.Object(
  {
    deleted: Type.String({ description: 'The id of the deleted workspace.' }),
    bytesRemoved: Type.Integer({ minimum: 0 }),
    filesRemoved: Type.Integer({ minimum: 0 }),
  },
  { title: 'WorkspaceDeletion' },
);
export type WorkspaceDeletion = Static<typeof WorkspaceDeletion>;

const WorkspaceEntry = Type.Object(
  {
    name: Type.String({ description: 'The name; bytes that are not UTF-8 show as U+FFFD.' }),
    type: Type.Union([Type.Literal('file'), Type.Literal('directory'), Type.Literal('symlink'), Type.Literal('other')]),
    size: Type.Integer({ minimum: 0, description: 'Apparent size in bytes (of the link itself for a symlink).' }),
    mode: Type.Integer({ minimum: 0, maximum: 0o7777, description: 'Permission and special bits.' }),
    mtime: Type.String({ description: 'Last modification, ISO 8601.' }),
  },
  { title: 'WorkspaceEntry' },
);

export const WorkspaceListing = Type.Object(
  { entries: Type.Array(WorkspaceEntry, { description: 'Sorted by name; nothing is followed.' }) },
  { title: 'WorkspaceListing' },
);
export type WorkspaceListing = Static<typeof WorkspaceListing>;

export const WorkspaceDirectoryMade = Type.Object(
  {
    path: Type.String(),
    made: Type.Integer({ minimum: 0, description: 'Directories made (0: it existed).' }),
  },
  { title: 'WorkspaceDirectoryMade' },
);
export type WorkspaceDirectoryMade = Static<typeof WorkspaceDirectoryMade>;

export const WorkspaceEntryRemoved = Type.Object(
  {
    path: Type.String(),
    files: Type.Integer({ minimum: 0, description: 'Entries removed that are not directories.' }),
    bytes: Type.Integer({ minimum: 0, description: 'Their apparent bytes.' }),
    directories: Type.Integer({ minimum: 0 }),
  },
  { title: 'WorkspaceEntryRemoved' },
);
export type WorkspaceEntryRemoved = Static<typeof WorkspaceEntryRemoved>;

export const WorkspaceArchiveExtracted = Type.Object(
  {
    path: Type.String({ description: 'The directory extracted into.' }),
    files: Type.Integer({ minimum: 0, description: 'Regular files written (made or replaced).' }),
    directories: Type.Integer({ minimum: 0, description: 'Directories made (existing ones not counted).' }),
    bytes: Type.Integer({ minimum: 0, description: 'Content bytes written.' }),
  },
  { title: 'WorkspaceArchiveExtracted' },
);
export type WorkspaceArchiveExtracted = Static<typeof WorkspaceArchiveExtracted>;
