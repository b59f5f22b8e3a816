/**
 * WorkerHostStatus and its parts, named as the host contract names them ("Worker host status",
 * "Root server warning", "Verified worker identity", "Worker resource limits", "Governed
 * availability"). Objects admit fields this version does not know: the contract is additive
 * and clients must tolerate new fields and absent optional ones.
 */
import { Type, type Static } from '@sinclair/typebox';

const IdentityMode = Type.Union([Type.Literal('separate_uid'), Type.Literal('shared_uid')]);
export const WorkerMode = Type.Union([Type.Literal('ordinary'), Type.Literal('restricted')]);

export const ModeAvailability = Type.Object(
  {
    available: Type.Boolean(),
    checkedAt: Type.String({ format: 'date-time' }),
    trigger: Type.Union([Type.Literal('boot'), Type.Literal('turn'), Type.Literal('check')]),
    requirement: Type.Optional(Type.String({ description: 'Present when unavailable: the missing requirement.' })),
  },
  { title: 'ModeAvailability' },
);
export type ModeAvailability = Static<typeof ModeAvailability>;

const LimitSource = Type.Union([Type.Literal('rlimit'), Type.Literal('cgroup'), Type.Literal('tmpfs')]);

export const WorkerLimitsStatus = Type.Object(
  {
    enforced: Type.Array(
      Type.Object({
        limit: Type.String({ description: 'A limit name; the list of names is open.' }),
        source: LimitSource,
        value: Type.Number({ description: 'bytes for data, file_size, memory, tmp_size; CPUs for cpu; else a count' }),
        backend: Type.Optional(Type.Union([Type.Literal('cgroup_v2'), Type.Literal('cgroup_v1')])),
      }),
    ),
    absent: Type.Array(Type.Object({ limit: Type.String(), source: LimitSource, reason: Type.String() })),
  },
  { title: 'WorkerLimitsStatus' },
);
export type WorkerLimitsStatus = Static<typeof WorkerLimitsStatus>;

export const GovernedStatus = Type.Object(
  {
    available: Type.Boolean(),
    reason: Type.Optional(Type.String({ description: 'Why governed cannot run, e.g. worker_host_unavailable.' })),
    detail: Type.Optional(Type.String()),
    hostExecution: Type.Union([Type.Literal('worker'), Type.Literal('host')]),
    profile: Type.Literal('governed'),
    protectedPaths: Type.Array(
      Type.Object({
        path: Type.String(),
        mode: Type.Union([Type.Literal('read_only'), Type.Literal('mask_file'), Type.Literal('mask_directory')]),
        reason: Type.String(),
      }),
    ),
    identity: Type.Optional(IdentityMode),
    // 0 is a root supervisor's shared_uid worker (its root-server warning says what that allows).
    workerUid: Type.Optional(Type.Integer({ minimum: 0 })),
    egress: Type.Object({ active: Type.Boolean(), detail: Type.String() }),
    configurationView: Type.Optional(Type.Union([Type.Literal('startup'), Type.Literal('live')])),
  },
  { title: 'GovernedStatus' },
);
export type GovernedStatus = Static<typeof GovernedStatus>;

const Facility = { available: Type.Boolean(), detail: Type.String() };

const BoundaryFacilities = Type.Object(
  {
    seccomp: Type.Object({ ...Facility, actions: Type.Array(Type.String()) }),
    networkNamespaces: Type.Object(Facility),
    landlock: Type.Object({ ...Facility, abi: Type.Union([Type.Integer(), Type.Null()]) }),
    cgroup: Type.Object({
      ...Facility,
      layout: Type.Union([Type.Literal('v2'), Type.Literal('hybrid'), Type.Literal('v1'), Type.Literal('none')]),
      ownCgroup: Type.Union([Type.String(), Type.Null()]),
      nsdelegate: Type.Boolean(),
      delegated: Type.Boolean(),
    }),
    identityHelper: Type.Object({
      ...Facility,
      path: Type.Union([Type.String(), Type.Null()]),
      qualified: Type.Boolean(),
    }),
  },
  { title: 'BoundaryFacilities' },
);

const WorkspaceCapStatus = Type.Object(
  {
    enforced: Type.Boolean({
      description: 'Each new workspace is its own filesystem of maxBytes: writes past it fail.',
    }),
    mechanism: Type.Union([Type.Literal('image'), Type.Literal('measured'), Type.Literal('none')], {
      description:
        'image: an ext4 image per workspace; measured: checked at turn start and on host writes only; none: no cap.',
    }),
    maxBytes: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
    maxFiles: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
    requirement: Type.Optional(Type.String({ description: 'What this host lacks for a real bound.' })),
  },
  { title: 'WorkspaceCapStatus' },
);

const AttackResult = Type.Union([Type.Literal('held'), Type.Literal('broken'), Type.Literal('skipped')]);

const AttestedCase = Type.Object(
  {
    case: Type.String({ description: 'The case, e.g. seccomp.ptrace (docs/probes.md, "Attack battery").' }),
    mode: WorkerMode,
    result: AttackResult,
    reason: Type.String({
      description:
        'The evidence (errno, bytes, exit status), or why the case was skipped (its control failed, a fact withheld).',
    }),
    checkedAt: Type.String({ format: 'date-time' }),
  },
  { title: 'AttestedCase' },
);

const BoundaryAttestation = Type.Object(
  {
    checkedAt: Type.String({ format: 'date-time' }),
    identity: Type.Optional(IdentityMode),
    cases: Type.Array(AttestedCase, { description: 'Every case in every mode that was attacked.' }),
    counts: Type.Object({
      held: Type.Integer({ minimum: 0 }),
      broken: Type.Integer({ minimum: 0 }),
      skipped: Type.Integer({ minimum: 0 }),
    }),
  },
  {
    title: 'BoundaryAttestation',
    description: 'The last attack battery run (turnhost check --attack); a broken case makes its mode unavailable.',
  },
);

/** The optional body of POST /api/status/worker-host. */
export const WorkerHostCheckRequest = Type.Object(
  {
    attack: Type.Optional(
      Type.Boolean({
        description:
          'Also run the attack battery as a turn in each available mode (docs/probes.md, "Attack battery"); the answer then carries `attested`.',
        'x-detail': 'expected a boolean',
      }),
    ),
  },
  {
    title: 'WorkerHostCheckRequest',
    additionalProperties: false,
    'x-detail': 'expected a JSON object',
    'x-unknown': 'unknown field',
  },
);
export type WorkerHostCheckRequest = Static<typeof WorkerHostCheckRequest>;

export const WorkerHostStatus = Type.Object(
  {
    ordinary: Type.Optional(ModeAvailability),
    restricted: Type.Optional(ModeAvailability),
    // Turns in a workspace: mode ordinary, a usable workspaces.root and, with an identity
    // helper, a workspace_root line of its config for it; absent when workspaces are not configured.
    workspaceTurns: Type.Optional(ModeAvailability),
    // The byte and inode cap of workspaces; absent when workspaces are not configured.
    workspaceCap: Type.Optional(WorkspaceCapStatus),
    rootServer: Type.Optional(Type.Object({ warning: Type.String() })),
    identity: Type.Optional(IdentityMode),
    // 0 is a root supervisor's shared_uid worker (its root-server warning says what that allows).
    workerUid: Type.Optional(Type.Integer({ minimum: 0 })),
    // separate_uid: the range the identity helper verified; each running turn holds one uid of it.
    uidRange: Type.Optional(Type.Object({ first: Type.Integer({ minimum: 1 }), count: Type.Integer({ minimum: 1 }) })),
    limits: WorkerLimitsStatus,
    governed: GovernedStatus,
    boundary: BoundaryFacilities,
    attested: Type.Optional(BoundaryAttestation),
  },
  { title: 'WorkerHostStatus' },
);
export type WorkerHostStatus = Static<typeof WorkerHostStatus>;
