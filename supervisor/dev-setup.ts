/**
 * `make run` on a development checkout, as root: writes a dev config and a root-owned identity
 * helper config so turns get `separate_uid` from the helper built in the tree, out of the box.
 * Usage: node dist/supervisor/dev-setup.js DATA_DIR   (prints the config path)
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { discoverCgroupLayout } from '../cgroup/discover.js';
import { prepareCgroupSubtree, subtreeTurnRoots } from '../cgroup/turn-cgroup.js';
import { defaultConfig } from './config/load.js';
import { writeHelperConfig } from './identity/helper-config.js';
import { turnSubtreeName } from './turns/launch-environment.js';

/** Far above ordinary users and the usual /etc/subuid allocations (100000 + 65536 * n). */
const DEV_UID_RANGE = { first: 2_900_000, count: 1000 };

function main(): number {
  const dataDir = path.resolve(process.argv[2] ?? '.turnhost-dev');
  if (process.geteuid?.() !== 0) {
    process.stderr.write('dev-setup: run as root (the identity helper runs directly for a root supervisor)\n');
    return 2;
  }
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  fs.chmodSync(dataDir, 0o700);

  const layout = discoverCgroupLayout({ proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' });
  const name = turnSubtreeName(layout, dataDir);
  const subtree = prepareCgroupSubtree(layout, name === undefined ? {} : { name });
  if (!subtree.ok) {
    process.stderr.write(`dev-setup: no cgroup subtree for turns: ${subtree.detail}\n`);
    return 1;
  }
  const helperConfig = path.join(dataDir, 'identity-helper.conf');
  const tempRoot = defaultConfig({ installed: false, cwd: repo }).turns.tempRoot;
  writeHelperConfig(helperConfig, {
    uidRange: DEV_UID_RANGE,
    callerGroup: 'root',
    cgroupRoots: subtreeTurnRoots(subtree.subtree),
    workerExec: process.execPath,
    workerArgs: [path.join(repo, 'dist/worker/main.js')],
    viewPaths: [repo], // the strict view must still show the checkout's worker and its modules
    tempRoots: [tempRoot],
  });
  const configFile = path.join(dataDir, 'turnhost.json');
  const config = {
    dataDir,
    identityHelper: { path: path.join(repo, 'identity-helper/build/identity-helper'), configPath: helperConfig },
    turns: { workspaceRoots: [repo, '/tmp', '/srv'], tempRoot },
  };
  fs.writeFileSync(configFile, JSON.stringify(config, null, 2) + '\n', { mode: 0o600 });
  process.stdout.write(configFile + '\n');
  return 0;
}

process.exitCode = main();
