/**
 * `turnhost run` whose own stdout is read slowly: the command is slowed to the reader's pace
 * (its pipe fills and it blocks), so the CLI's memory stays near its idle size whatever the
 * command writes, through the server and with --local. Without backpressure the CLI buffered
 * everything the command wrote that its reader had not taken yet.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { REPO_ROOT } from '../../../support/turn-harness.js';
import { serveForTest, writeSupervisorConfig } from '../../../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';

stopTapInjectingIntoChildren();
// 256 MiB read at a deliberate pace, twice: on a loaded machine this takes minutes, not seconds.
t.setTimeout(600_000);

const CLI = path.join(REPO_ROOT, 'dist/supervisor/cli/main.js');
const PEAK_RSS = path.join(import.meta.dirname, 'fixtures/peak-rss.mjs');
const OUTPUT_BYTES = 256 * 1024 * 1024;

/** Runs the CLI with `args`, reading its stdout one chunk per `paceMs`; answers bytes read and peak RSS. */
function runPaced(
  args: string[],
  paceMs: number,
): Promise<{ code: number | null; bytes: number; peakKiB: number; stderr: string }> {
  const rssFile = fs.mkdtempSync('/run/turnhost-bp-') + '/rss';
  const child = spawn(process.execPath, [PEAK_RSS, CLI, rssFile, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stdin.end('go\n');
  let bytes = 0;
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  child.stdout.on('data', (d: Buffer) => {
    bytes += d.length;
    if (paceMs === 0) return;
    child.stdout.pause();
    setTimeout(() => child.stdout.resume(), paceMs);
  });
  return new Promise((resolve) =>
    child.on('close', (code) => {
      const peakKiB = Number(fs.readFileSync(rssFile, 'utf8'));
      fs.rmSync(path.dirname(rssFile), { recursive: true, force: true });
      resolve({ code, bytes, peakKiB, stderr });
    }),
  );
}

// The command writes once it read its first input line, which the CLI sends only once attached:
// output from before an attach is kept only up to the turn's bounded backlog (docs/http-api.md).
const writer = ['/bin/sh', '-c', `read go && head -c ${OUTPUT_BYTES} /dev/zero`];

t.test('run --local: a slow reader slows the command, not the CLI memory', async (t) => {
  const local = writeSupervisorConfig({ name: 'bp-local' });
  t.teardown(() => fs.rmSync(local.base, { recursive: true, force: true }));
  const common = ['run', '--local', '--config', local.configPath, '--cwd', local.workspace, '--'];
  const idle = await runPaced([...common, '/bin/true'], 0);
  t.equal(idle.code, 0, idle.stderr);
  const paced = await runPaced([...common, ...writer], 1);
  t.equal(paced.code, 0, paced.stderr);
  t.equal(paced.bytes, OUTPUT_BYTES, `every byte arrives (${paced.bytes})`);
  const grewMiB = (paced.peakKiB - idle.peakKiB) / 1024;
  t.ok(
    grewMiB < 64,
    `the CLI grew ${grewMiB.toFixed(0)} MiB over its idle peak for ${OUTPUT_BYTES >> 20} MiB of output`,
  );
});

t.test('run through the server: the same, end to end over the attach socket', async (t) => {
  const served = await serveForTest(t, { name: 'bp-remote' });
  const common = ['run', '--config', served.configPath, '--cwd', served.workspace, '--'];
  const idle = await runPaced([...common, '/bin/true'], 0);
  t.equal(idle.code, 0, idle.stderr);
  const paced = await runPaced([...common, ...writer], 1);
  t.equal(paced.code, 0, paced.stderr);
  t.equal(paced.bytes, OUTPUT_BYTES, `every byte arrives (${paced.bytes})`);
  const grewMiB = (paced.peakKiB - idle.peakKiB) / 1024;
  t.ok(
    grewMiB < 64,
    `the CLI grew ${grewMiB.toFixed(0)} MiB over its idle peak for ${OUTPUT_BYTES >> 20} MiB of output`,
  );
});
