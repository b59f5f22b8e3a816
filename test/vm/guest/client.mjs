// Guest-side helpers: the supervisor's HTTP API (token from its data dir), systemd and process
// inspection. Every wait is bounded and names what it waited for when it gives up.
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import { expect } from './tap.mjs';

export const BASE_URL = 'http://127.0.0.1:7707';
export const DATA_DIR = '/var/lib/turnhost';
export const SERVICE = 'turnhost-vmtest.service';
export const SERVICE_CGROUP = `/sys/fs/cgroup/system.slice/${SERVICE}`;
export const WORKSPACE = '/srv/vmwork';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs a command without a shell; answers its exit code and output (never throws). */
export function run(argv) {
  const result = spawnSync(argv[0], argv.slice(1), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return {
    code: result.status,
    signal: result.signal,
    stdout: result.stdout ?? '',
    stderr: result.stderr ?? String(result.error ?? ''),
  };
}

/** `run`, failing the current check unless the command exited 0. */
export function expectSuccess(argv) {
  const result = run(argv);
  expect(result.code === 0, `${argv.join(' ')} exited ${result.code ?? result.signal}`, {
    stdout: result.stdout.slice(-3000),
    stderr: result.stderr.slice(-3000),
  });
  return result;
}

export function sh(command) {
  return execFileSync('/bin/sh', ['-c', command], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Thrown by a waitFor probe when waiting longer cannot help (the turn already ended). */
export class WaitAborted extends Error {}

/** Polls `probe` (which answers a value or undefined) every `intervalMs` until `seconds` pass. */
export async function waitFor(what, seconds, probe, intervalMs = 500) {
  const deadline = Date.now() + seconds * 1000;
  let lastError;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      if (error instanceof WaitAborted) throw error;
      lastError = error;
    }
    if (Date.now() > deadline)
      throw new Error(`gave up after ${seconds}s waiting for ${what}${lastError ? `: ${lastError.message}` : ''}`);
    await sleep(intervalMs);
  }
}

/** A supervisor the guest talks to: its address and its data directory (for the token). */
export const MAIN_SUPERVISOR = { baseUrl: BASE_URL, dataDir: DATA_DIR };

function token(target) {
  return fs.readFileSync(`${target.dataDir}/api-token`, 'utf8').trim();
}

/**
 * One request on a fresh connection: a pooled keep-alive connection that the server closes
 * while the guest (24x slower under TCG) is about to reuse it fails the request before it is
 * sent ("fetch failed"), which says nothing about the supervisor.
 */
export function api(method, path, body) {
  return apiAt(MAIN_SUPERVISOR, method, path, body);
}

/** `api` against another supervisor of the guest (`target`: { baseUrl, dataDir }). */
export function apiAt(target, method, path, body) {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${target.baseUrl}${path}`,
      {
        method,
        agent: false,
        headers: {
          authorization: `Bearer ${token(target)}`,
          ...(payload === undefined
            ? {}
            : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) }),
        },
      },
      (response) => {
        const chunks = [];
        response.on('data', (chunk) => chunks.push(chunk));
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let json;
          try {
            json = JSON.parse(text);
          } catch {
            json = { unparsed: text };
          }
          resolve({ status: response.statusCode, body: json });
        });
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(payload);
  });
}

/** Waits until the supervisor answers /api/health and its token exists. */
export async function waitForSupervisor(seconds = 180, target = MAIN_SUPERVISOR) {
  return waitFor(`the supervisor at ${target.baseUrl} to answer /api/health`, seconds, async () => {
    if (!fs.existsSync(`${target.dataDir}/api-token`)) return undefined;
    const response = await fetch(`${target.baseUrl}/api/health`);
    return response.ok ? true : undefined;
  });
}

export function serviceMainPid() {
  return Number(sh(`systemctl show -p MainPID --value ${SERVICE}`).trim());
}

export async function createTurn(request) {
  const created = await api('POST', '/api/turns', {
    sessionId: 'vm-tier',
    mode: 'ordinary',
    cwd: WORKSPACE,
    ...request,
  });
  if (created.status !== 201)
    throw new Error(`POST /api/turns answered ${created.status}: ${JSON.stringify(created.body)}`);
  return created.body.turn;
}

export async function getTurn(id) {
  const answer = await api('GET', `/api/turns/${id}`);
  if (answer.status !== 200)
    throw new Error(`GET /api/turns/${id} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  return answer.body.turn;
}

export async function waitForTurnState(id, state, seconds) {
  return waitFor(`turn ${id} to be ${state}`, seconds, async () => {
    const turn = await getTurn(id);
    return turn.state === state ? turn : undefined;
  });
}

export async function turnEvents(id) {
  const answer = await api('GET', `/api/governance/events?turn=${encodeURIComponent(id)}`);
  if (answer.status !== 200) throw new Error(`events answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  return answer.body.events;
}

/** Pids (as strings) of processes whose real uid is `uid`. */
export function processesOfUid(uid) {
  return sh(`ps -e -o ruid=,pid=,args= | awk '$1 == ${Number(uid)} { $1 = ""; print }'`)
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '');
}

export function cgroupProcs(dir) {
  try {
    return fs
      .readFileSync(`${dir}/cgroup.procs`, 'utf8')
      .split('\n')
      .filter((line) => line !== '');
  } catch {
    return null;
  }
}
