/**
 * `make run` on a development checkout, as root: writes a dev config and a root-owned identity
 * helper (a copy of the one built in the tree, with its config) so turns get `separate_uid`
 * out of the box, from a checkout anywhere: the copy and its config live in a root-owned
 * directory, since the probes refuse a helper below a directory others may write (a clone
 * under /tmp). Each data directory gets a uid range of its own, and a workspace root of its
 * own that holds neither the data directory nor the helper.
 * Usage: node dist/supervisor/dev-setup.js DATA_DIR   (prints the config path)
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { discoverCgroupLayout } from '../cgroup/discover.js';
import { prepareCgroupSubtree, subtreeTurnRoots } from '../cgroup/turn-cgroup.js';
import { loadConfig } from './config/load.js';
import { tokenFilePath } from './config/token-path.js';
import { writeHelperConfig } from './identity/helper-config.js';
import { turnSubtreeName } from './turns/launch-environment.js';

/** Far above ordinary users and the usual /etc/subuid allocations (100000 + 65536 * n). */
const DEV_UID_BASE = 2_000_000;
const DEV_UID_COUNT = 1000;
const DEV_UID_SLOTS = 900;
/** Root-owned: the probes qualify a helper only below directories no one but root can change. */
const DEV_HELPER_PARENT = '/usr/local/lib/turnhost-dev';

function mkdirOwnedByRoot(dir: string, mode: number): void {
  fs.mkdirSync(dir, { recursive: true, mode });
  fs.chmodSync(dir, mode);
}

function main(): number {
  const dataDir = path.resolve(process.argv[2] ?? '.turnhost-dev');
  if (process.geteuid?.() !== 0) {
    process.stderr.write('dev-setup: run as root (the identity helper runs directly for a root supervisor)\n');
    return 2;
  }
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
  mkdirOwnedByRoot(dataDir, 0o700);
  const key = createHash('sha256').update(fs.realpathSync(dataDir)).digest('hex');
  const slot = Number.parseInt(key.slice(0, 8), 16) % DEV_UID_SLOTS;

  const layout = discoverCgroupLayout({ proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' });
  const name = turnSubtreeName(layout, dataDir);
  const subtree = prepareCgroupSubtree(layout, name === undefined ? {} : { name });
  if (!subtree.ok) {
    process.stderr.write(`dev-setup: no cgroup subtree for turns: ${subtree.detail}\n`);
    return 1;
  }
  const helperDir = path.join(DEV_HELPER_PARENT, key.slice(0, 16));
  mkdirOwnedByRoot(helperDir, 0o755);
  const helperPath = path.join(helperDir, 'identity-helper');
  const workspacesRoot = `${dataDir}-workspaces`;
  mkdirOwnedByRoot(workspacesRoot, 0o711);
  const helperConfig = path.join(helperDir, 'identity-helper.conf');
  fs.copyFileSync(path.join(repo, 'identity-helper/build/identity-helper'), `${helperPath}.new`);
  fs.chmodSync(`${helperPath}.new`, 0o755);
  fs.renameSync(`${helperPath}.new`, helperPath);
  writeHelperConfig(helperConfig, {
    uidRange: { first: DEV_UID_BASE + slot * DEV_UID_COUNT, count: DEV_UID_COUNT },
    callerGroup: 'root',
    cgroupRoots: subtreeTurnRoots(subtree.subtree),
    // The helper executes the worker from an fd: the view need not show the checkout.
    workerExec: path.join(repo, 'worker/build/turnhost-worker'),
    workerArgs: [],
    // Workspaces: leases recorded next to the helper (root's, persistent), workspaces beside
    // the data directory, root's 0711 so a worker reaches its own without listing the others.
    uidLeaseDir: path.join(helperDir, 'leases'),
    workspaceRoots: [workspacesRoot],
  });
  // Sticky and world-writable like /tmp: each worker uid keeps what it creates its own.
  const workspace = `${dataDir}-workspace`;
  mkdirOwnedByRoot(workspace, 0o1777);
  const configFile = path.join(dataDir, 'turnhost.json');
  const config = {
    dataDir,
    identityHelper: { path: helperPath, configPath: helperConfig },
    turns: { workspaceRoots: [workspace] },
    workspaces: { root: workspacesRoot },
  };
  fs.writeFileSync(configFile, JSON.stringify(config, null, 2) + '\n', { mode: 0o600 });
  process.stderr.write(`dev-setup: turns run in ${workspace} (e.g. bin/turnhost run --cwd ${workspace} -- id)\n`);
  process.stderr.write(`dev-setup: ${statusPageHint(configFile)}\n`);
  process.stdout.write(configFile + '\n');
  return 0;
}

/**
 * Where the status page of the server `make run` starts will answer, and which token signs in:
 * the configuration as `serve` will read it (the environment may move the listener or set the token).
 */
function statusPageHint(configFile: string): string {
  const loaded = loadConfig({ configPath: configFile, env: process.env });
  if (!loaded.ok) return `the configuration does not load: ${loaded.detail}`;
  const { listen, apiToken, dataDir } = loaded.config;
  const token =
    apiToken === null
      ? `the token in ${tokenFilePath(dataDir)} (made at the first start)`
      : 'the token apiToken configures (TURNHOST_API_TOKEN or the configuration)';
  if (listen.tcp === null) return `no TCP listener (listen.tcp is null): no status page; the API token is ${token}`;
  const [host, port] = [
    listen.tcp.slice(0, listen.tcp.lastIndexOf(':')),
    listen.tcp.slice(listen.tcp.lastIndexOf(':') + 1),
  ];
  const shown = host === '0.0.0.0' ? '127.0.0.1' : host === '::' || host === '[::]' ? '[::1]' : host;
  return `status page http://${shown}:${port}/ui/ (sign in with ${token})`;
}

process.exitCode = main();
