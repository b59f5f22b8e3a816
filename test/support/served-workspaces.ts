/**
 * Real `turnhost serve` supervisors with workspaces, one per identity mode a test file covers:
 * separate_uid through a helper copy leased `range` (root supervisor) or a setuid helper of its
 * own (non-root supervisor), shared_uid under root or under a throwaway non-root uid. Each is stopped, and the helper removed, when the test ends.
 * Also curl, a client of its own, against a supervisor's contract-checked socket.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import {
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type HelperSetup,
  type ServedSupervisor,
} from './served-supervisor.js';

export interface ServedMode {
  /** The subtest's name. */
  label: string;
  /** The supervisor's name (its directories and cgroups). */
  name: string;
  /**
   * separate_uid: the supervisor uses the helper. A root supervisor shares the file's helper; a
   * non-root one (`uid`) gets a setuid helper of its own, leasing from `range`.
   */
  helper?: boolean;
  /** The uid range of a non-root supervisor's own helper. */
  range?: { first: number; count: number };
  /** A non-root supervisor's uid (plainUid(slot)); absent: root. */
  uid?: number;
  /** More `workspaces` keys of its config (e.g. maxBytes). */
  workspacesConfig?: Record<string, unknown>;
}

/** Starts one supervisor per mode, in order; `teardown` stops them and removes the helper. */
export async function startServedSupervisors(
  teardown: (fn: () => unknown) => void,
  range: { first: number; count: number },
  modes: ServedMode[],
): Promise<Array<[string, ServedSupervisor]>> {
  const bases = modes
    .filter((mode) => mode.helper === true && mode.uid === undefined)
    .map((mode) => supervisorBase(mode.name));
  const helper =
    bases.length > 0
      ? setUpHelper(
          bases.map((base) => base.dataDir),
          range,
          { roots: bases.map((base) => base.workspacesRoot) },
        )
      : null;
  if (helper) teardown(() => helper.remove());
  const started: Array<[string, ServedSupervisor]> = [];
  teardown(() => stopSupervisors(started.map(([, supervisor]) => supervisor)));
  for (const mode of modes) {
    const own = mode.helper === true && mode.uid !== undefined ? nonRootHelper(mode, mode.uid) : null;
    if (own) teardown(() => own.remove());
    const modeHelper = own ?? (mode.helper === true ? helper : null);
    const supervisor = await startSupervisor({
      name: mode.name,
      workspaces: true,
      ...(modeHelper ? { helper: modeHelper } : {}),
      ...(mode.uid === undefined ? {} : { uid: mode.uid }),
      ...(mode.workspacesConfig ? { workspacesConfig: mode.workspacesConfig } : {}),
    });
    started.push([mode.label, supervisor]);
  }
  return started;
}

/** A setuid helper for one non-root separate_uid supervisor, leasing from its own range. */
function nonRootHelper(mode: ServedMode, uid: number): HelperSetup {
  if (!mode.range) throw new Error(`${mode.name}: a non-root separate_uid supervisor needs its own uid range`);
  return setUpHelper(
    [],
    mode.range,
    { roots: [supervisorBase(mode.name).workspacesRoot] },
    { nonRootCaller: { uid, name: mode.name } },
  );
}

export interface CurlAnswer {
  status: number;
  /** The body as text. */
  body: string;
  /** The body's bytes. */
  raw: Buffer;
  /** The body as JSON, null when it is not. */
  json: any;
}

/** curl, a client of its own, against the supervisor's (contract-checked) socket. */
export function curl(
  supervisor: ServedSupervisor,
  method: string,
  url: string,
  data?: string | Buffer,
  contentType = 'application/octet-stream',
): Promise<CurlAnswer> {
  const token = fs.readFileSync(path.join(supervisor.dataDir, 'api-token'), 'utf8').trim();
  const args = ['-s', '-X', method, '--unix-socket', supervisor.socket, '-H', `Authorization: Bearer ${token}`];
  if (data !== undefined) args.push('-H', `Content-Type: ${contentType}`, '--data-binary', '@-');
  // The contract proxy forwards a request without a length chunked: say there is no body.
  else args.push('-H', 'Content-Length: 0');
  args.push('-w', '\n%{http_code}', `http://turnhost${url}`);
  return new Promise((resolve, reject) => {
    const child = spawn('curl', args, { stdio: ['pipe', 'pipe', 'inherit'] });
    const out: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.on('error', reject);
    child.on('close', () => {
      const all = Buffer.concat(out);
      const cut = all.lastIndexOf(0x0a);
      const raw = all.subarray(0, cut);
      const body = raw.toString('utf8');
      let json: any = null;
      try {
        json = JSON.parse(body);
      } catch {
        json = null;
      }
      resolve({ status: Number(all.subarray(cut + 1).toString('utf8')), body, raw, json });
    });
    // A server that answers before reading the whole body closes the pipe: not this test's error.
    child.stdin.on('error', () => undefined);
    child.stdin.end(data ?? '');
  });
}
