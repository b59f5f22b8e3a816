/**
 * A host integration with the typed client: check the worker host, run one turn with its
 * input and output piped to ours, follow the turn's governance events, print the result.
 *
 *   TURNHOST_API_TOKEN=... node dist/examples/host-integration.js --socket /run/turnhost/api.sock \
 *     --cwd /srv/workspace -- /bin/sh -c 'echo hello'
 *
 * `--server http://HOST:PORT` instead of `--socket`. Exits with the command's exit code, 3 when
 * the host cannot run ordinary turns, 2 on a usage error. It imports the client the way an
 * integrator does, as `turnhost/client` (inside this repository the package refers to itself).
 */
import { parseArgs } from 'node:util';
import { createClient, TurnhostApiError, type ServerTarget } from 'turnhost/client';

function target(socket: string | undefined, server: string | undefined): ServerTarget | null {
  if (socket !== undefined) return { kind: 'unix', path: socket };
  const match = /^http:\/\/([^/:]+):([0-9]+)\/?$/.exec(server ?? '');
  return match === null ? null : { kind: 'tcp', host: match[1]!, port: Number(match[2]) };
}

async function main(): Promise<number> {
  const { values, positionals } = parseArgs({
    options: { socket: { type: 'string' }, server: { type: 'string' }, cwd: { type: 'string' } },
    allowPositionals: true,
  });
  const where = target(values.socket, values.server);
  const token = process.env['TURNHOST_API_TOKEN'];
  if (where === null || token === undefined || values.cwd === undefined || positionals.length === 0) {
    process.stderr.write('usage: TURNHOST_API_TOKEN=... host-integration --socket PATH --cwd DIR -- ARGV...\n');
    return 2;
  }
  const client = createClient({ target: where, token });

  const host = await client.checkWorkerHost();
  if (host.ordinary?.available !== true) {
    process.stderr.write(`host cannot run ordinary turns: ${host.ordinary?.requirement ?? 'not probed'}\n`);
    return 3;
  }
  process.stdout.write(`host: ordinary available (identity ${host.identity ?? 'unverified'})\n`);

  const turn = await client.createTurn({
    sessionId: 'host-integration',
    mode: 'ordinary',
    argv: positionals,
    cwd: values.cwd,
  });
  process.stdout.write(`turn: ${turn.id}\n`);

  // Events are followed from the start of the store, filtered to this turn, until its exit.
  const stop = new AbortController();
  const following = (async () => {
    for await (const event of client.streamEvents({ turn: turn.id, after: 0, signal: stop.signal })) {
      process.stdout.write(`event: ${event.kind}\n`);
      if (event.kind === 'worker_exit') stop.abort();
    }
  })();

  const attached = await client.attachTurn(turn.id);
  // Our stdin goes to the turn's, and its end to the command as end of input.
  process.stdin.on('data', (data: Buffer) => attached.write(data));
  process.stdin.on('end', () => attached.eof());
  process.stdin.on('error', () => undefined);
  for await (const chunk of attached.output)
    (chunk.stream === 'stderr' ? process.stderr : process.stdout).write(chunk.data);
  const result = (await attached.result) ?? (await client.getTurn(turn.id)).result;
  await following;
  process.stdout.write(`result: ${JSON.stringify(result)}\n`);
  return result?.exitCode ?? 1;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    const text =
      error instanceof TurnhostApiError ? `${error.code} (${error.status}): ${error.message}` : String(error);
    process.stderr.write(`host-integration: ${text}\n`);
    process.exit(1);
  },
);
