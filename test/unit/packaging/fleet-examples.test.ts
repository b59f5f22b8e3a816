/**
 * The fleet examples (packaging/hosting/) run on no cluster here: the Kubernetes DaemonSet is
 * checked against the Kubernetes API's published schemas (kubernetes-models validates a
 * manifest with the OpenAPI schemas of the API it models), and both examples must say plainly
 * that they are untested.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import t from 'tap';
import { REPO_ROOT } from '../../support/turn-harness.js';

const HOSTING = path.join(REPO_ROOT, 'packaging/hosting');
const require = createRequire(import.meta.url);

interface KubernetesModel {
  validate(): void;
}
const { DaemonSet } = require('kubernetes-models/apps/v1') as {
  DaemonSet: new (manifest: unknown) => KubernetesModel;
};

/** The manifest's documents, read with PyYAML (what cloud-init's schema check uses too). */
function yamlDocuments(file: string): unknown[] {
  const read = spawnSync(
    'python3',
    ['-c', 'import json, sys, yaml\nprint(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))', file],
    { encoding: 'utf8' },
  );
  if (read.status !== 0) throw new Error(`reading ${file}: ${read.stderr}`);
  return JSON.parse(read.stdout) as unknown[];
}

t.test('the DaemonSet validates against the Kubernetes API schema', async (t) => {
  const [manifest, ...rest] = yamlDocuments(path.join(HOSTING, 'kubernetes-daemonset.yaml'));
  t.equal(rest.length, 0, 'one document');
  t.doesNotThrow(() => new DaemonSet(manifest).validate());
  const daemonSet = manifest as {
    spec: {
      template: { spec: { containers: Array<{ command: string[]; readinessProbe: { httpGet: { path: string } } }> } };
    };
  };
  const container = daemonSet.spec.template.spec.containers[0]!;
  t.same(
    container.command,
    ['/usr/bin/turnhost', 'serve', '--config', '/etc/turnhost/turnhost.json'],
    "the unit's command",
  );
  t.equal(container.readinessProbe.httpGet.path, '/api/ready', 'placement reads readiness');
});

t.test('the validation has teeth: a broken DaemonSet is refused', async (t) => {
  const [manifest] = yamlDocuments(path.join(HOSTING, 'kubernetes-daemonset.yaml'));
  const broken = structuredClone(manifest) as { spec: { template: { spec: { containers: unknown } } } };
  broken.spec.template.spec.containers = 'turnhost';
  t.throws(() => new DaemonSet(broken).validate(), /containers/);
  const noSelector = structuredClone(manifest) as { spec: Record<string, unknown> };
  delete noSelector.spec['selector'];
  t.throws(() => new DaemonSet(noSelector).validate(), /selector/);
});

t.test('both fleet examples say they are untested', async (t) => {
  for (const file of ['kubernetes-daemonset.yaml', 'nomad-system-job.hcl']) {
    const text = fs.readFileSync(path.join(HOSTING, file), 'utf8');
    t.match(text.split('\n')[0], /^# EXAMPLE, NOT TESTED HERE/, file);
  }
});
