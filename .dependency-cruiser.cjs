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
 *
 * Inside supervisor/ six layers, top to bottom; a module imports the layers below its own and the
 * siblings its layer permits, never upward:
 *   1 cli/          the `turnhost` command: a program, nothing imports it
 *     dev-setup.ts  the developer setup script: a program of its own beside the CLI
 *   2 daemon.ts     wires every mechanism into the running supervisor; only the CLI starts it
 *     compose.ts    builds the two services and links them; the daemon, `run --local` and tests
 *   3 http/         the API surface the daemon serves; it drives the two services below
 *   4 workspaces/   a service behind the API; workspaces/ and turns/ never import each other,
 *     turns/        the turn lifecycle, the other service; so each of the two changes alone
 *   5 observe/      what the supervisor is doing (activity, metrics); reports the probes' status
 *     probes/       what the boundary can enforce here; verifies the view through the helper
 *     view/         the masked view's keys, which the lifecycle sends and the probes verify
 *     identity/     the helper client and the helper's config files: the protocol the rest speak
 *     systemd/      sd_notify and journal entries, fed by the daemon alone
 *   6 config/       the loaded configuration and the token file's place: the floor
 *     fs/           the fs guard, host writes, scratch pruning: the floor
 *     db/           SQLite open and migrations: the floor
 *     software.ts   the package's root, release and source commit: the floor
 *     limits/       limit parsing; stands on config/'s types
 *     events/       the governance event store; stands on db/
 * In layer 5 observe/, probes/, view/, identity/ each import only those listed after them, and
 * systemd/ is apart (imports none of them, none imports it). In layer 6 the floor imports no
 * sibling, and limits/ and events/ do not import each other. A new folder or file of supervisor/
 * is placed in this order (and in the rules below) before anything may import it.
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
      to: { path: '^(api|client|examples|cgroup|proxy|worker|supervisor|bench|test)/' },
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
    {
      name: 'supervisor-module-has-a-layer',
      severity: 'error',
      comment:
        'Every supervisor module sits in the layer order at the top of this file; place a new folder or file there (and in these rules) before importing it.',
      from: { path: '^supervisor/' },
      to: {
        path: '^supervisor/',
        pathNot:
          '^supervisor/((cli|http|workspaces|turns|probes|identity|observe|view|systemd|config|fs|limits|events|db)/|(daemon|compose|dev-setup|software)\\.ts$)',
      },
    },
    {
      name: 'supervisor-entry-points-apart',
      severity: 'error',
      comment: 'The CLI and the developer setup script are separate programs; neither is a library of the other.',
      from: { path: '^supervisor/(cli/|dev-setup\\.ts$)' },
      to: { path: '^supervisor/(cli/|dev-setup\\.ts$)', pathNot: '^supervisor/$1' },
    },
    {
      name: 'supervisor-daemon-imports-no-entry-point',
      severity: 'error',
      comment: 'The daemon is started by the CLI; it never reaches back into a program that runs it.',
      from: { path: '^supervisor/daemon\\.ts$' },
      to: { path: '^supervisor/(cli/|dev-setup\\.ts$)' },
    },
    {
      name: 'supervisor-http-imports-no-layer-above',
      severity: 'error',
      comment: 'The HTTP surface is served by the daemon; it knows neither the daemon nor the programs above it.',
      from: { path: '^supervisor/http/' },
      to: { path: '^supervisor/(cli/|(daemon|compose|dev-setup)\\.ts$)' },
    },
    {
      name: 'supervisor-services-import-no-layer-above',
      severity: 'error',
      comment:
        'Workspaces and turns are services the API drives; they never depend on the API, the daemon or a program.',
      from: { path: '^supervisor/(workspaces|turns)/' },
      to: { path: '^supervisor/((http|cli)/|(daemon|compose|dev-setup)\\.ts$)' },
    },
    {
      name: 'supervisor-workspaces-and-turns-apart',
      severity: 'error',
      comment: 'Workspaces and turns are sibling services: neither imports the other, so each changes alone.',
      from: { path: '^supervisor/(workspaces|turns)/' },
      to: { path: '^supervisor/(workspaces|turns)/', pathNot: '^supervisor/$1/' },
    },
    {
      name: 'supervisor-mechanisms-import-no-layer-above',
      severity: 'error',
      comment:
        'Probes, the identity helper client, observation, the view and systemd serve the services; they never import a service, the API, the daemon or a program.',
      from: { path: '^supervisor/(probes|identity|observe|view|systemd)/' },
      to: { path: '^supervisor/((workspaces|turns|http|cli)/|(daemon|compose|dev-setup)\\.ts$)' },
    },
    {
      name: 'supervisor-identity-below-its-siblings',
      severity: 'error',
      comment:
        'The identity helper client speaks the helper protocol; the view, probes and metrics build on it, never the reverse.',
      from: { path: '^supervisor/identity/' },
      to: { path: '^supervisor/(probes|observe|view)/' },
    },
    {
      name: 'supervisor-view-below-probes-and-observe',
      severity: 'error',
      comment:
        'The view keys are what the lifecycle sends and the probes verify; they depend on the helper protocol alone.',
      from: { path: '^supervisor/view/' },
      to: { path: '^supervisor/(probes|observe)/' },
    },
    {
      name: 'supervisor-probes-below-observe',
      severity: 'error',
      comment: "Metrics report the probes' status; the probes never depend on what observes them.",
      from: { path: '^supervisor/probes/' },
      to: { path: '^supervisor/observe/' },
    },
    {
      name: 'supervisor-systemd-imports-no-sibling',
      severity: 'error',
      comment:
        'sd_notify and the journal are channels to the service manager that the daemon feeds; they need nothing of the mechanisms beside them.',
      from: { path: '^supervisor/systemd/' },
      to: { path: '^supervisor/(probes|identity|observe|view)/' },
    },
    {
      name: 'supervisor-no-sibling-imports-systemd',
      severity: 'error',
      comment: 'Only the daemon talks to the service manager; a mechanism reports through events and status instead.',
      from: { path: '^supervisor/(probes|identity|observe|view)/' },
      to: { path: '^supervisor/systemd/' },
    },
    {
      name: 'supervisor-bottom-imports-no-layer-above',
      severity: 'error',
      comment:
        'Configuration, the fs guard, limits, events, the database and the package files are the ground every other supervisor module stands on.',
      from: { path: '^supervisor/((config|fs|limits|events|db)/|software\\.ts$)' },
      to: {
        path: '^supervisor/((probes|identity|observe|view|systemd|workspaces|turns|http|cli)/|(daemon|compose|dev-setup)\\.ts$)',
      },
    },
    {
      name: 'supervisor-floor-imports-no-sibling',
      severity: 'error',
      comment:
        'config/, fs/, db/ and software.ts are the floor: they import no other supervisor module, so anything may use them.',
      from: { path: '^supervisor/((config|fs|db)/|software\\.ts$)' },
      to: { path: '^supervisor/((config|fs|limits|events|db)/|software\\.ts$)', pathNot: '^supervisor/$1' },
    },
    {
      name: 'supervisor-limits-and-events-apart',
      severity: 'error',
      comment: 'Limit parsing and the event store stand on the floor side by side; neither imports the other.',
      from: { path: '^supervisor/(limits|events)/' },
      to: { path: '^supervisor/(limits|events)/', pathNot: '^supervisor/$1/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { extensions: ['.ts', '.js'] },
  },
};
