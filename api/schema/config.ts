/**
 * The supervisor's configuration file: one TypeBox definition that is the loader's validator
 * (ajv, through api/schema/validate.ts), the TypeScript type of the loaded configuration, and
 * the JSON Schema published for editors and deployment tools (docs/config.schema.json,
 * /usr/share/turnhost/config.schema.json in the package). docs/configuration.md documents
 * every key; a test keeps that table and this schema in step.
 *
 * Annotations, as in turns.ts: `x-detail` is the text a refusal of the node reports after the
 * key path, `x-unknown` the text for a key the object does not define, `x-required` the text
 * for a key the object needs and lacks. A union carries the detail, its members none, so a
 * refusal reads "expected ... or null" rather than naming one branch.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';

/** Every limit a configuration may set or disable; the daemon checks it agrees with its own list. */
export const CONFIG_LIMIT_NAMES = [
  'processes',
  'data',
  'file_size',
  'open_files',
  'memory',
  'pids',
  'cpu',
  'tmp_size',
] as const;
export const CONFIG_LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export const PROTECTED_PATH_MODES = ['read_only', 'mask_file', 'mask_directory'] as const;

/** Keys an earlier release read, by key path, each with why it went and what replaces it. */
const RETIRED_CONFIG_KEYS: Readonly<Record<string, string>> = {
  'turns.tempRoot': "each turn's /tmp is a tmpfs of its own in its view, sized by limits.tmp_size",
  'turns.envExtra':
    'every variable a turn request names reaches its command, except the names the boundary owns (docs/http-api.md)',
  'egress.inferenceHosts':
    'turns reach a model only through the per-turn relay that holds the credential: list each upstream in ' +
    'egress.inference.providers (restricted turns have no other egress)',
};

/**
 * An absolute path that path.normalize leaves unchanged: a leading "/", no empty, "." or ".."
 * component (a trailing "/" is kept, as normalize keeps it), no NUL.
 */
export const ABSOLUTE_PATH_PATTERN = '^(?!.*//)(?!(?:.*/)?\\.{1,2}(?:/|$))/[^\\u0000]*$';

const DEC_OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])';
const IPV4 = `(?:${DEC_OCTET}\\.){3}${DEC_OCTET}`;
const H16 = '[0-9A-Fa-f]{1,4}';
const LS32 = `(?:${H16}:${H16}|${IPV4})`;
/** RFC 3986's IPv6address: every textual form, with an IPv4 tail, and no zone. */
const IPV6 = `(?:${[
  `(?:${H16}:){6}${LS32}`,
  `::(?:${H16}:){5}${LS32}`,
  `(?:${H16})?::(?:${H16}:){4}${LS32}`,
  `(?:(?:${H16}:){0,1}${H16})?::(?:${H16}:){3}${LS32}`,
  `(?:(?:${H16}:){0,2}${H16})?::(?:${H16}:){2}${LS32}`,
  `(?:(?:${H16}:){0,3}${H16})?::${H16}:${LS32}`,
  `(?:(?:${H16}:){0,4}${H16})?::${LS32}`,
  `(?:(?:${H16}:){0,5}${H16})?::${H16}`,
  `(?:(?:${H16}:){0,6}${H16})?::`,
].join('|')})`;
/** An IPv4 CIDR with a prefix of 0-32, or an IPv6 one with 0-128; prefixes without leading zeros. */
export const CIDR_PATTERN = `^(?:${IPV4}/(?:3[0-2]|[12]?[0-9])|${IPV6}/(?:12[0-8]|1[01][0-9]|[1-9]?[0-9]))$`;
const PORT = '(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[0-5][0-9]{4}|[0-9]{1,4})';
/** "HOST:PORT": a name or IPv4 address, or a bracketed IPv6 address; port 0-65535. */
export const HOST_PORT_PATTERN = `^(?:\\[${IPV6}\\]|[A-Za-z0-9.-]+):${PORT}$`;
const HOST_PATTERN_PATTERN = '^(?:\\*\\.)?[A-Za-z0-9.:\\[\\]_-]{1,255}$';
/** A limit written as a string: a number with an optional K, M, G or T. */
const LIMIT_STRING_PATTERN = '^[0-9]+(?:\\.[0-9]+)?[KMGTkmgt]?$';
const RELATIVE_RULE_PATH_PATTERN = '^(?!/)(?!(?:.*/)?\\.\\.(?:/|$))[^\\u0000]+$';

const section = { additionalProperties: false, 'x-detail': 'expected an object', 'x-unknown': 'unknown key' };
const described = (description: string) => ({ description });

const absolutePath = (description: string) =>
  Type.String({ pattern: ABSOLUTE_PATH_PATTERN, 'x-detail': 'expected a normalised absolute path', description });
const absolutePathOrNull = (description: string) =>
  Type.Union([Type.String({ pattern: ABSOLUTE_PATH_PATTERN }), Type.Null()], {
    'x-detail': 'expected a normalised absolute path or null',
    description,
  });
const hostPortOrNull = (description: string) =>
  Type.Union([Type.String({ pattern: HOST_PORT_PATTERN }), Type.Null()], {
    'x-detail': 'expected "HOST:PORT" or null',
    description,
  });
const boolean = (description: string) => Type.Boolean({ 'x-detail': 'expected true or false', description });
const positiveInteger = (description: string) =>
  Type.Integer({
    minimum: 1,
    maximum: Number.MAX_SAFE_INTEGER,
    'x-detail': 'expected a positive integer',
    description,
  });
const positiveIntegerOrNull = (description: string) =>
  Type.Union([Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }), Type.Null()], {
    'x-detail': 'expected a positive integer or null',
    description,
  });
const nonNegativeInteger = (description: string) =>
  Type.Integer({
    minimum: 0,
    maximum: Number.MAX_SAFE_INTEGER,
    'x-detail': 'expected a non-negative integer',
    description,
  });
const arrayOf = <T extends TSchema>(item: T, description: string) =>
  Type.Array(item, { 'x-detail': 'expected an array', description });
const hostPatterns = (description: string) =>
  arrayOf(
    Type.String({
      pattern: HOST_PATTERN_PATTERN,
      'x-detail': 'expected a host pattern (host, *.suffix, optional :port)',
    }),
    description,
  );
/** A closed set of strings, reported as one refusal rather than one per member. */
const oneOf = <T extends readonly string[]>(values: T, description?: string) =>
  Type.Unsafe<T[number]>({
    type: 'string',
    enum: [...values],
    'x-detail': `expected one of ${values.map((v) => `'${v}'`).join(', ')}`,
    ...(description === undefined ? {} : { description }),
  });

const LimitValue = Type.Union([Type.Number({ exclusiveMinimum: 0 }), Type.String({ pattern: LIMIT_STRING_PATTERN })], {
  'x-detail': 'expected a positive number or a string such as "512M"',
});

export const LimitSettings = Type.Object(
  {
    processes: Type.Optional(LimitValue),
    data: Type.Optional(LimitValue),
    file_size: Type.Optional(LimitValue),
    open_files: Type.Optional(LimitValue),
    memory: Type.Optional(LimitValue),
    pids: Type.Optional(LimitValue),
    cpu: Type.Optional(LimitValue),
    tmp_size: Type.Optional(LimitValue),
  } satisfies Record<(typeof CONFIG_LIMIT_NAMES)[number], unknown>,
  {
    ...section,
    'x-unknown': `unknown limit (expected one of ${CONFIG_LIMIT_NAMES.join(', ')})`,
    title: 'LimitSettings',
    description:
      'Default worker limits: numbers, or strings with K, M, G or T ("512M"). Per-turn overrides may only lower them. ' +
      "tmp_size sizes the turn's own /tmp, /var/tmp and /dev/shm (1 MiB to 1 TiB).",
  },
);
export type LimitSettings = Static<typeof LimitSettings>;

const ProtectedPathRule = Type.Object(
  {
    root: absolutePath('The workspace root the rule applies to.'),
    path: Type.String({
      pattern: RELATIVE_RULE_PATH_PATTERN,
      'x-detail': 'expected a relative path without ".."',
      description: 'A path relative to root.',
    }),
    mode: oneOf(PROTECTED_PATH_MODES),
    reason: Type.String({
      minLength: 1,
      maxLength: 4096,
      pattern: '^[^\\u0000]*$',
      'x-detail': 'expected a non-empty string',
      description: 'Reported with every refusal the rule causes.',
    }),
  },
  { ...section, 'x-required': 'missing', title: 'ProtectedPathRule' },
);
type ProtectedPathRule = Static<typeof ProtectedPathRule>;

const INFERENCE_PROVIDER_KINDS = ['anthropic', 'openai'] as const;
const BROKER_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
/** A broker name: it becomes a URL path segment and, upper-cased, part of an environment variable name. */
const BROKER_NAME_PATTERN = '^[a-z][a-z0-9_]{0,31}$';
/** An https URL (http only for loopback, which tests use), without userinfo, query or fragment. */
const BROKER_URL_PATTERN =
  '^(?:https://[^/?#@\\s]+|http://(?:127\\.[0-9.]+|localhost|\\[::1\\])(?::[0-9]{1,5})?)(?:/[^?#\\s]*)?$';
/** An absolute request path: a leading "/", no "..", no query or fragment. */
const ROUTE_PATH_PATTERN = '^/(?!.*(?:^|/)\\.\\.(?:/|$))[^?#\\s]*$';

const brokerName = (description: string) =>
  Type.String({
    pattern: BROKER_NAME_PATTERN,
    'x-detail': 'expected a name of a-z, 0-9 and _ (starting with a letter, at most 32 characters)',
    description,
  });
const brokerUrl = (description: string) =>
  Type.String({
    pattern: BROKER_URL_PATTERN,
    maxLength: 2048,
    'x-detail': 'expected an https URL without userinfo, query or fragment (http only on loopback)',
    description,
  });

const SecretSource = Type.Union(
  [
    Type.Object(
      {
        env: Type.String({
          pattern: '^[A-Za-z_][A-Za-z0-9_]{0,127}$',
          description: "A variable of the supervisor's own environment.",
        }),
      },
      { additionalProperties: false },
    ),
    Type.Object(
      {
        file: Type.String({
          pattern: ABSOLUTE_PATH_PATTERN,
          description:
            'A file only the supervisor can read (regular, owned by root or the supervisor, no group or other ' +
            'permission bits) inside a path every view hides (the data directory, /etc/turnhost).',
        }),
      },
      { additionalProperties: false },
    ),
  ],
  {
    'x-detail': 'expected { "env": NAME } or { "file": "/absolute/path" }',
    description: 'Where the supervisor reads the secret; a turn never holds it.',
    title: 'SecretSource',
  },
);

const InferenceProvider = Type.Object(
  {
    name: brokerName('Served to turns at /inference/<name> on their egress listener.'),
    kind: oneOf(INFERENCE_PROVIDER_KINDS, 'Which API: its default routes, its credential header and its variables.'),
    baseUrl: brokerUrl('The upstream, e.g. https://api.anthropic.com; its path prefixes every route.'),
    secret: SecretSource,
    caFile: Type.Optional(absolutePath('A PEM CA trusted for this upstream, in addition to the system roots.')),
    routes: Type.Optional(
      Type.Array(
        Type.String({ pattern: ROUTE_PATH_PATTERN, maxLength: 512, 'x-detail': 'expected an absolute path' }),
        {
          minItems: 1,
          uniqueItems: true,
          'x-detail': 'expected a non-empty array of distinct absolute paths',
          description:
            'The exact POST paths relayed; default anthropic /v1/messages, /v1/messages/count_tokens; openai ' +
            '/v1/chat/completions, /v1/responses.',
        },
      ),
    ),
  },
  { ...section, 'x-required': 'missing', title: 'InferenceProvider' },
);

const BrokeredCredential = Type.Object(
  {
    name: brokerName('Served to turns at /credentials/<name>/; its URL in TURNHOST_CREDENTIAL_<NAME>_URL.'),
    baseUrl: brokerUrl('The upstream; a request for /credentials/<name>/<rest> goes to <baseUrl>/<rest>.'),
    secret: SecretSource,
    header: Type.String({
      pattern: '^[a-z0-9-]{1,64}$',
      'x-detail': 'expected a lower-case header name (a-z, 0-9, -)',
      description: 'The header the credential is sent in, e.g. authorization.',
    }),
    format: Type.String({
      pattern: '^[\\x20-\\x7e]*\\{secret\\}[\\x20-\\x7e]*$',
      maxLength: 256,
      'x-detail': 'expected printable text containing {secret}, e.g. "Bearer {secret}"',
      description: 'The header value; {secret} is replaced by the secret.',
    }),
    methods: Type.Optional(
      Type.Array(oneOf(BROKER_METHODS), {
        minItems: 1,
        uniqueItems: true,
        'x-detail': 'expected a non-empty array of distinct methods',
        description: 'Methods forwarded; default all of them.',
      }),
    ),
    pathPrefixes: Type.Optional(
      Type.Array(
        Type.String({ pattern: ROUTE_PATH_PATTERN, maxLength: 512, 'x-detail': 'expected an absolute path' }),
        { minItems: 1, 'x-detail': 'expected a non-empty array of absolute paths', description: 'Default ["/"].' },
      ),
    ),
    gitHost: Type.Optional(
      Type.String({
        pattern: '^[a-z0-9.-]{1,253}(?::[0-9]{1,5})?$',
        'x-detail': 'expected a lower-case host name, optionally with :port',
        description: 'git in the turn reaches https://<gitHost>/ through this broker (GIT_CONFIG_* variables).',
      }),
    ),
    caFile: Type.Optional(absolutePath('A PEM CA trusted for this upstream, in addition to the system roots.')),
  },
  { ...section, 'x-required': 'missing', title: 'BrokeredCredential' },
);

/** Every key present: what the loader answers after merging defaults, file, environment and flags. */
export const TurnhostConfig = Type.Object(
  {
    dataDir: absolutePath('Where the database, the api-token and the fallback log live.'),
    listen: Type.Object(
      {
        tcp: hostPortOrNull('"HOST:PORT" (or "[::1]:PORT"); port 0 picks one; null: no TCP listener.'),
        socket: absolutePathOrNull('A unix socket path (mode 0660), or null.'),
        allowNonLoopback: boolean('A tcp host other than 127.0.0.0/8, ::1 or localhost is refused unless true.'),
      },
      { ...section, ...described('At least one of tcp and socket must be set.') },
    ),
    apiToken: Type.Union([Type.String({ pattern: '^[!-~]{16,512}$' }), Type.Null()], {
      'x-detail': 'expected 16-512 printable ASCII characters without spaces',
      description: 'The bearer token; null: <dataDir>/api-token (0600), generated at first start.',
    }),
    logLevel: oneOf(CONFIG_LOG_LEVELS),
    events: Type.Object(
      {
        unboundRetentionDays: positiveInteger('Days kept for events with no session.'),
        journal: boolean('Also send each committed event to the systemd journal as a structured entry.'),
        sessionRetentionDays: nonNegativeInteger(
          'Days an ended session (events and turn records) is kept after its last activity; 0 keeps it forever.',
        ),
      },
      section,
    ),
    metrics: Type.Object(
      {
        listen: hostPortOrNull(
          'A separate loopback "HOST:PORT" serving only GET /metrics, without the token; null: none.',
        ),
      },
      section,
    ),
    identityHelper: Type.Object(
      {
        path: absolutePathOrNull('The identity helper (separate_uid); null: shared_uid.'),
        configPath: absolutePathOrNull('A helper config override, honoured by the helper for a root caller only.'),
      },
      section,
    ),
    modes: Type.Object(
      {
        restricted: Type.Object(
          { enabled: boolean('Probe and accept restricted turns.') },
          { ...section, ...described('The restricted mode: inference egress only.') },
        ),
      },
      section,
    ),
    limits: LimitSettings,
    limitsDisabled: Type.Array(oneOf(CONFIG_LIMIT_NAMES), {
      uniqueItems: true,
      'x-detail': 'expected an array of distinct limit names',
      description:
        'Limits turned off on purpose, reported absent ("disabled by the operator"); tmp_size cannot be disabled.',
    }),
    egress: Type.Object(
      {
        allowlist: hostPatterns(
          'Host patterns (host, *.suffix, optional :port); without a port an entry allows 80 and 443.',
        ),
        denylist: hostPatterns('Host patterns; without a port an entry denies every port.'),
        allowAddressRanges: arrayOf(
          Type.String({ pattern: CIDR_PATTERN, 'x-detail': 'expected a CIDR such as "10.1.0.0/16"' }),
          'CIDRs the proxy may dial although their address class is normally refused.',
        ),
        inference: Type.Object(
          {
            providers: Type.Array(InferenceProvider, {
              'x-detail': 'expected an array',
              description: "Model upstreams relayed per turn; a restricted turn's only egress.",
            }),
            ordinaryTurns: boolean('Ordinary turns get the relay too (restricted turns always do).'),
            maxRequestBytes: positiveInteger('The largest inference request body relayed; larger answers 413.'),
          },
          { ...section, ...described('The per-turn inference relay (docs/egress.md).') },
        ),
        credentials: Type.Array(BrokeredCredential, {
          'x-detail': 'expected an array',
          description: 'HTTP APIs (and git hosts) ordinary turns reach through a broker that adds the credential.',
        }),
        turnAdditionsAllowed: hostPatterns('Patterns a turn request may add to its allowlist; empty: none.'),
        maxConnections: positiveInteger('Connections per turn.'),
        maxBytes: positiveInteger('Bytes per turn, both directions.'),
        idleTimeoutMs: positiveInteger('Idle time per connection before it is closed.'),
      },
      section,
    ),
    fs: Type.Object(
      {
        protectedPaths: Type.Array(ProtectedPathRule, {
          'x-detail': 'expected an array',
          description: 'Paths beneath a workspace root a turn may not change (or see).',
        }),
        scratch: Type.Object(
          {
            dir: absolutePathOrNull('The scratch directory, or null.'),
            capBytes: positiveInteger('The scratch cap.'),
            pruneIntervalSeconds: positiveInteger('How often scratch is pruned.'),
          },
          section,
        ),
        hostWriteMaxBytes: positiveInteger('The largest single host write.'),
      },
      section,
    ),
    turns: Type.Object(
      {
        maxConcurrent: positiveInteger(
          "Beyond it POST /api/turns answers 429. Unset: derived from the host's memory and cores and limits.memory (docs/configuration.md, Capacity).",
        ),
        defaultTimeoutSeconds: positiveInteger('Must not exceed maxTimeoutSeconds.'),
        maxTimeoutSeconds: positiveInteger('The longest timeout a turn may ask for.'),
        workspaceRoots: arrayOf(
          absolutePath('A directory a plain turn may run beneath.'),
          "Absolute directories a plain turn's cwd must lie beneath.",
        ),
        preparedWorkers: nonNegativeInteger(
          'Workers booted ahead of the turn that claims them (same mode, cwd, limits, egress additions); 0 turns it off.',
        ),
        preparedWorkerIdleSeconds: positiveInteger('An unclaimed prepared worker is stopped after this long.'),
        outputRetainBytes: positiveInteger(
          "The bytes of each of a turn's output streams kept on disk (dataDir/output); past it the rest is counted as dropped.",
        ),
      },
      section,
    ),
    workspaces: Type.Object(
      {
        root: absolutePathOrNull(
          'The directory whose entries are workspaces; null: no workspaces. With the identity helper it must ' +
            "also be a workspace_root of the helper's config. Not /, not containing or inside dataDir.",
        ),
        maxBytes: positiveIntegerOrNull(
          'Each new workspace is its own filesystem of this many bytes (at least 1 MiB): writes past it fail ' +
            'with ENOSPC in turns and host writes alike. null: plain directories, no cap (docs/workspaces.md).',
        ),
        maxFiles: positiveIntegerOrNull(
          "Inodes for files and directories of each new workspace's filesystem (needs maxBytes). null: mkfs's own count.",
        ),
      },
      section,
    ),
    probes: Type.Object(
      {
        attackAtBoot: boolean(
          'Run the attack battery (turnhost check --attack) once the supervisor listens; a broken case makes its mode unavailable.',
        ),
        attackIntervalSeconds: nonNegativeInteger('Run the attack battery again every this many seconds; 0: never.'),
      },
      { ...section, ...described('The attack battery (docs/probes.md, "Attack battery"), besides on request.') },
    ),
    probeRoots: Type.Object(
      {
        proc: absolutePath('Where the probes read /proc.'),
        sysFsCgroup: absolutePath('Where the probes read /sys/fs/cgroup.'),
      },
      { ...section, ...described('"/" in production; tests point the probes at constructed trees.') },
    ),
  },
  { ...section, 'x-required': 'missing', title: 'TurnhostConfig' },
);
export type TurnhostConfig = Static<typeof TurnhostConfig>;

type Node = Record<string, unknown>;

/**
 * The file's schema: the same keys, every one optional at every depth (a file names only what
 * it changes, the defaults fill the rest), a `$schema` string for editors, and each retired key
 * refused with its reason. An array's items keep their required keys (a rule is whole or wrong).
 */
function fileSchemaOf(config: TSchema): TSchema {
  const copy = (node: Node, keyPath: string): Node => {
    if (node['type'] !== 'object' || node['properties'] === undefined) return node;
    const properties: Record<string, Node> = {};
    for (const [key, child] of Object.entries(node['properties'] as Record<string, Node>))
      properties[key] = copy(child, keyPath === '' ? key : `${keyPath}.${key}`);
    for (const [retired, reason] of Object.entries(RETIRED_CONFIG_KEYS)) {
      const parent = retired.slice(0, retired.lastIndexOf('.'));
      if (parent === keyPath)
        properties[retired.slice(retired.lastIndexOf('.') + 1)] = {
          not: {},
          deprecated: true,
          'x-detail': `no longer read: ${reason}; remove it`,
          description: `No longer read: ${reason}.`,
        };
    }
    const { required: _required, 'x-required': _missing, ...rest } = node;
    return { ...rest, properties };
  };
  const file = copy(JSON.parse(JSON.stringify(config)) as Node, '');
  (file['properties'] as Record<string, Node>)['$schema'] = {
    type: 'string',
    'x-detail': 'expected a string',
    description: 'The schema this file follows, for editors; the supervisor ignores it.',
  };
  file['title'] = 'TurnhostConfigFile';
  return file as TSchema;
}

export const TurnhostConfigFile: TSchema = fileSchemaOf(TurnhostConfig);

/**
 * Each key's schema given its default, so an editor shows it. The defaults come from the caller
 * (the supervisor's `defaultConfig` for the installed layout) so they are written once.
 */
function withDefaults(node: Node, defaults: unknown): Node {
  if (defaults === undefined) return node;
  if (node['type'] !== 'object' || node['properties'] === undefined || Array.isArray(defaults))
    return { ...node, default: defaults };
  const properties: Record<string, Node> = {};
  for (const [key, child] of Object.entries(node['properties'] as Record<string, Node>))
    properties[key] = withDefaults(child, (defaults as Record<string, unknown> | null)?.[key]);
  return { ...node, properties };
}

/** The published JSON Schema (draft-07, which editors read) of the configuration file. */
export function renderConfigSchema(defaults: Static<typeof TurnhostConfig>): string {
  const document = {
    $schema: 'http://json-schema.org/draft-07/schema#',
    ...withDefaults(TurnhostConfigFile, defaults),
    description:
      "The turnhost supervisor's configuration file: every key optional, the defaults (those of the " +
      'installed package) fill the rest. docs/configuration.md documents every key.',
  };
  return `${JSON.stringify(document, null, 2)}\n`;
}
