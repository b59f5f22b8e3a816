/**
 * `GET /api/turns/:id/output?stream=&offset=`: a stream's kept bytes from `offset` to what is
 * there now (supervisor/turns/output.ts), read from its file, never held whole in memory; while
 * the turn runs too. The headers say how far the stream got: `X-Turnhost-Output-Written` (every
 * byte it wrote), `X-Turnhost-Output-Dropped` (those past the cap, not kept) and
 * `X-Turnhost-Output-Complete` (true once the turn has ended and nothing more is written).
 * 410 `output_gone` when the record says bytes were kept but the file is gone.
 */
import fs from 'node:fs';
import type { RequestHandler } from 'express';
import { isValidId } from '../../api/schema/ids.js';
import type { OutputStreamName, TurnManager } from '../turns/types.js';
import { sendError } from './errors.js';
import { QueryCheck, requestQuery, sendQueryRefusal, type QueryFailure } from './query-params.js';

const STREAMS: readonly OutputStreamName[] = ['stdout', 'stderr', 'pty'];

/** The answer's headers. */
const OUTPUT_HEADERS = {
  written: 'X-Turnhost-Output-Written',
  dropped: 'X-Turnhost-Output-Dropped',
  complete: 'X-Turnhost-Output-Complete',
} as const;

/** An offset in bytes: a decimal integer, at most 2^53 - 1. */
export function parseOffset(check: QueryCheck, name: string): number | undefined {
  const raw = check.get(name);
  if (raw === null) return undefined;
  const n = /^[0-9]{1,16}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isSafeInteger(n)) {
    check.refuse(name, 'expected a byte offset (a non-negative integer)');
    return undefined;
  }
  return n;
}

function parseOutputQuery(
  params: URLSearchParams,
): { ok: true; stream: OutputStreamName | undefined; offset: number } | QueryFailure {
  const check = new QueryCheck(params, ['stream', 'offset']);
  const stream = check.get('stream');
  if (stream !== null && !(STREAMS as readonly string[]).includes(stream))
    check.refuse('stream', `expected one of ${STREAMS.join(', ')}`);
  const offset = parseOffset(check, 'offset') ?? 0;
  return check.failure() ?? { ok: true, stream: (stream ?? undefined) as OutputStreamName | undefined, offset };
}

export function readTurnOutput(turns: TurnManager): RequestHandler {
  return (req, res) => {
    const id = String(req.params['id']);
    const parsed = parseOutputQuery(requestQuery(req));
    const found = isValidId(id) ? turns.output(id) : null;
    if (found === null || !found.ok)
      return sendError(res, 404, 'not_found', `no turn ${isValidId(id) ? id : '(malformed id)'}`);
    if (!parsed.ok) return sendQueryRefusal(res, parsed);
    const { output } = found;
    // The stream defaults to the turn's first: stdout with pipes, pty with a terminal.
    const stream = parsed.stream ?? output.streams[0] ?? 'stdout';
    const state = output.stream(stream);
    if (state === null)
      return sendError(res, 400, 'invalid_request', `stream: turn ${id} has ${output.streams.join(' and ')}`, {
        field: 'stream',
        errors: [{ field: 'stream', detail: `turn ${id} has ${output.streams.join(' and ')}` }],
      });
    if (state.gone) return sendError(res, 410, 'output_gone', `the output of turn ${id} is no longer kept (${stream})`);
    if (parsed.offset > state.kept) {
      const detail = `beyond the ${state.kept} bytes kept of ${stream}`;
      return sendError(res, 400, 'invalid_request', `offset: ${detail}`, {
        field: 'offset',
        errors: [{ field: 'offset', detail }],
      });
    }
    let fd: number | null = null;
    if (state.kept > parsed.offset) {
      try {
        fd = fs.openSync(output.filePath(stream), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
      } catch {
        // Removed with its session between the record's read and this open.
        return sendError(res, 410, 'output_gone', `the output of turn ${id} is no longer kept (${stream})`);
      }
    }
    res.setHeader(OUTPUT_HEADERS.written, String(state.written));
    res.setHeader(OUTPUT_HEADERS.dropped, String(state.dropped));
    res.setHeader(OUTPUT_HEADERS.complete, String(state.complete));
    res.setHeader('Content-Type', 'application/octet-stream');
    res.setHeader('Content-Length', String(state.kept - parsed.offset));
    if (fd === null || req.method === 'HEAD') {
      if (fd !== null) fs.closeSync(fd);
      return void res.end();
    }
    // The range is fixed now: bytes appended meanwhile are the next read's (from offset + length).
    const file = fs.createReadStream('', { fd, start: parsed.offset, end: state.kept - 1 });
    file.on('error', () => res.destroy());
    res.on('close', () => file.destroy());
    file.pipe(res);
  };
}
