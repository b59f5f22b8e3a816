/**
 * The layering of the tree, enforced by `npm run lint` (docs/architecture.md, "Layers"):
 *   core/            imports nothing of ours
 *   cgroup/, worker/ import core/ and api/schema/ids.ts only
 *   proxy/           imports core/ and api/schema/ids.ts only
 *   supervisor/      may import every layer; nothing imports it but bench/ and test/
 *   api/             the HTTP contract (schemas, routes); imports nothing of ours
 *   client/          the typed API client; imports api/ only, so it loads no daemon module
 *   examples/        import client/ and api/ only, as an integrator would
 * and no import cycle anywhere. Type-only imports count: a type is a dependency too.
 */
module.exports = {
  forbidden: [
    {
      name: 'no-cycle',
      severity: 'error',
      comment: 'An import cycle makes modules impossible to read, test or change one at a time.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'core-imports-nothing-of-ours',
      severity: 'error',
      comment: 'core/ holds the contract every layer shares; it depends on no other layer.',
      from: { path: '^core/' },
      to: { path: '^(cgroup|proxy|worker|supervisor|bench|test)/' },
    },
    {
      name: 'mechanisms-import-core-only',
      severity: 'error',
      comment:
        'A mechanism (cgroup/, worker/, proxy/) depends on core/ alone, never on another mechanism or the supervisor.',
      from: { path: '^(cgroup|worker|proxy)/' },
      to: { path: '^(cgroup|worker|proxy|supervisor|bench|test)/', pathNot: '^$1/' },
    },
    {
      name: 'mechanisms-import-only-the-id-rules-of-api',
      severity: 'error',
      comment:
        'A mechanism checks ids (a turn id names its cgroup leaf) by the rule the API publishes, so the two cannot ' +
        'drift: api/schema/ids.ts imports nothing, so this loads no schema library. The rest of api/ is the HTTP ' +
        'contract, which no mechanism needs.',
      from: { path: '^(cgroup|worker|proxy)/' },
      to: { path: '^api/', pathNot: '^api/schema/ids\\.ts$' },
    },
    {
      name: 'api-imports-nothing-of-ours',
      severity: 'error',
      comment: 'api/ is the contract the daemon, the client and integrators share; it depends on no layer.',
      from: { path: '^api/' },
      to: { path: '^(core|cgroup|proxy|worker|supervisor|client|examples|bench|test)/' },
    },
    {
      name: 'client-imports-api-only',
      severity: 'error',
      comment: 'Importing the client must load no daemon module and no native addon.',
      from: { path: '^(client|examples)/' },
      to: { path: '^(core|cgroup|proxy|worker|supervisor|bench|test)/' },
    },
    {
      name: 'nothing-imports-tests-or-benches',
      severity: 'error',
      from: { path: '^(api|client|core|cgroup|proxy|worker|supervisor)/' },
      to: { path: '^(bench|test|examples)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
