/**
 * A turn's output, kept on disk: every byte a stream writes is appended, as it arrives, to its
 * own file under the data directory (`<dataDir>/output/<turnId>/<stream>`: stdout and stderr
 * apart with pipes, `pty` with a terminal), up to `turns.outputRetainBytes` per stream. What
 * comes past the cap is counted as dropped: a reader attached while it was written gets it
 * live, and a reader that replays from the files is told of what it missed (a `dropped` event),
 * never cut silently. The supervisor holds no backlog in memory: an attach replays from the
 * files in bounded reads, then follows the live output, and the output route reads the same
 * files. The directory is the supervisor's own (0700 in a data directory no view shows), so no
 * turn can read another's output or change its own record of it.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../../core/log.js';
import { fail } from '../../core/result.js';
import type {
  OutputCounts,
  OutputOffsets,
  OutputStreamName,
  OutputStreamState,
  TurnAttachment,
  TurnOutputReader,
  TurnResult,
  TurnStreamEvent,
} from './types.js';

/** How much is read from a file per step of a replay. */
const REPLAY_CHUNK_BYTES = 64 * 1024;

/** A turn's streams: the terminal's one, or the two pipes. */
export function streamsOf(tty: boolean): OutputStreamName[] {
  return tty ? ['pty'] : ['stdout', 'stderr'];
}

/** The output directory of the data directory: each turn's files, created and removed here. */
export class OutputFiles {
  readonly root: string;

  constructor(dataDir: string) {
    this.root = path.join(dataDir, 'output');
  }

  /** The turn's file of one stream. Turn ids are checked ids (api/schema/ids.ts): no separator. */
  pathOf(turnId: string, stream: OutputStreamName): string {
    return path.join(this.root, turnId, stream);
  }

  /** Creates the turn's directory and an empty file per stream, each the supervisor's alone. */
  create(turnId: string, streams: readonly OutputStreamName[]): Map<OutputStreamName, number> {
    fs.mkdirSync(this.root, { mode: 0o700, recursive: true });
    fs.chmodSync(this.root, 0o700);
    const dir = path.join(this.root, turnId);
    fs.mkdirSync(dir, { mode: 0o700 });
    const fds = new Map<OutputStreamName, number>();
    const flags = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_APPEND;
    try {
      for (const stream of streams)
        fds.set(stream, fs.openSync(this.pathOf(turnId, stream), flags | fs.constants.O_NOFOLLOW, 0o600));
    } catch (error) {
      for (const fd of fds.values()) fs.closeSync(fd);
      this.remove(turnId);
      throw error;
    }
    return fds;
  }

  /** The bytes kept of a stream, or null when its file is gone. */
  keptBytes(turnId: string, stream: OutputStreamName): number | null {
    try {
      const stat = fs.lstatSync(this.pathOf(turnId, stream));
      return stat.isFile() ? stat.size : null;
    } catch {
      return null;
    }
  }

  remove(turnId: string): void {
    fs.rmSync(path.join(this.root, turnId), { recursive: true, force: true });
  }

  /** Removes the output of every turn `known` does not name: what a crash left between a delete's steps. */
  removeOrphans(known: (turnId: string) => boolean): string[] {
    let entries: string[];
    try {
      entries = fs.readdirSync(this.root);
    } catch {
      return [];
    }
    const orphans = entries.filter((turnId) => !known(turnId));
    for (const turnId of orphans) this.remove(turnId);
    return orphans;
  }
}

/**
 * One reader of a turn's output: an attach. It gets the kept bytes from its offsets, then a
 * `dropped` for each stream's bytes it missed that were not kept, then every byte live.
 */
export interface OutputSubscriber {
  deliver(event: TurnStreamEvent): void;
  /** Resolves once the reader has room for more replayed output. */
  drained(): Promise<void>;
  /** The reader went away: its replay stops. */
  gone(): boolean;
}

interface StreamState {
  fd: number | null;
  /** Bytes in the file: the offset the next kept byte gets. */
  kept: number;
  written: number;
  dropped: number;
  /** A finished turn's file is gone though its record says bytes were kept. */
  gone: boolean;
}

interface Subscription {
  subscriber: OutputSubscriber;
  live: boolean;
  /**
   * Per stream, the offset in the stream up to which the reader has its bytes (or was told they
   * were dropped). The cap stops writing for good, so byte i of a stream is in its file exactly
   * when i < kept: stream and file offsets agree on every kept byte.
   */
  sent: Map<OutputStreamName, number>;
}

/**
 * The output of one turn, running or finished: appends while it runs, replays to each reader
 * from the files, follows live. A finished turn's is built from its files and its result.
 */
export class TurnOutput implements TurnOutputReader {
  private readonly state = new Map<OutputStreamName, StreamState>();
  private readonly subscriptions = new Set<Subscription>();
  private exit: TurnResult | null = null;

  private constructor(
    private readonly files: OutputFiles,
    readonly turnId: string,
    readonly streams: readonly OutputStreamName[],
    private readonly retainBytes: number,
    private readonly logger: Logger | null,
  ) {}

  /** A running turn's output: its files are created now (a failure throws; no turn runs without them). */
  static open(files: OutputFiles, turnId: string, tty: boolean, retainBytes: number, logger: Logger): TurnOutput {
    const streams = streamsOf(tty);
    const output = new TurnOutput(files, turnId, streams, retainBytes, logger);
    const fds = files.create(turnId, streams);
    for (const stream of streams)
      output.state.set(stream, { fd: fds.get(stream) ?? null, kept: 0, written: 0, dropped: 0, gone: false });
    return output;
  }

  /**
   * A finished turn's output as its files and its result say. A file that is gone while the
   * result counts kept bytes (or has no counts: a record of an earlier version) is `gone`, and
   * its bytes count as dropped, so an attach says so rather than ending silently short.
   */
  static finished(files: OutputFiles, turnId: string, tty: boolean, result: TurnResult): TurnOutput {
    const streams = streamsOf(tty);
    const output = new TurnOutput(files, turnId, streams, 0, null);
    for (const stream of streams) {
      const onDisk = files.keptBytes(turnId, stream);
      const counted = result.output?.[stream];
      const expected = counted ? counted.written - counted.dropped : null;
      const gone = onDisk === null && (expected === null ? result.status !== 'launch_refused' : expected > 0);
      const written = counted?.written ?? onDisk ?? 0;
      output.state.set(stream, {
        fd: null,
        kept: onDisk ?? 0,
        written,
        dropped: gone ? written : (counted?.dropped ?? 0),
        gone,
      });
    }
    output.exit = result;
    return output;
  }

  /**
   * Appends what the stream wrote, up to the cap; the rest is counted as dropped. Readers that
   * follow live get every byte, kept or not: the cap bounds what is kept for later readers.
   */
  push(stream: OutputStreamName, data: Buffer): void {
    const state = this.state.get(stream);
    if (state === undefined || this.exit !== null) return;
    const room = state.fd === null ? 0 : Math.max(0, this.retainBytes - state.kept);
    const keptBefore = state.kept;
    let keep = data.subarray(0, Math.min(room, data.length));
    if (keep.length > 0 && !this.append(stream, state, keep))
      keep = keep.subarray(0, Math.max(0, Math.min(keep.length, state.kept - keptBefore)));
    state.kept = keptBefore + keep.length;
    const start = state.written;
    state.written += data.length;
    state.dropped += data.length - keep.length;
    for (const subscription of this.subscriptions) {
      if (!subscription.live) continue;
      const from = Math.max(0, (subscription.sent.get(stream) ?? 0) - start);
      if (from >= data.length) continue;
      subscription.sent.set(stream, state.written);
      subscription.subscriber.deliver({ type: 'output', stream, data: data.subarray(from) });
    }
  }

  /** The turn has ended: the files are closed; readers get the exit once they have every byte. */
  end(result: TurnResult): void {
    if (this.exit !== null) return;
    for (const state of this.state.values()) {
      if (state.fd !== null) fs.closeSync(state.fd);
      state.fd = null;
    }
    this.exit = result;
    for (const subscription of this.subscriptions)
      if (subscription.live) subscription.subscriber.deliver({ type: 'exit', result });
  }

  /** Each stream's counts: what the turn's result records. */
  counts(): OutputCounts {
    const counts: OutputCounts = {};
    for (const [stream, { written, dropped }] of this.state) counts[stream] = { written, dropped };
    return counts;
  }

  /** One stream's counts now, with the bytes kept; null for a stream the turn does not have. */
  stream(stream: OutputStreamName): OutputStreamState | null {
    const state = this.state.get(stream);
    if (state === undefined) return null;
    const { kept, written, dropped, gone } = state;
    return { kept, written, dropped, complete: this.exit !== null, gone };
  }

  filePath(stream: OutputStreamName): string {
    return this.files.pathOf(this.turnId, stream);
  }

  /**
   * A reader from the given offsets (absent: the start): the files are replayed stream by stream,
   * then the reader follows live, then gets the exit. Answers its unsubscribe.
   */
  subscribe(subscriber: OutputSubscriber, offsets: OutputOffsets = {}): () => void {
    const subscription: Subscription = {
      subscriber,
      live: false,
      sent: new Map(this.streams.map((stream) => [stream, offsets[stream] ?? 0])),
    };
    this.subscriptions.add(subscription);
    void this.replay(subscription).catch((error: unknown) => {
      this.logger?.error('output replay failed', { turnId: this.turnId, detail: (error as Error).message });
      this.subscriptions.delete(subscription);
    });
    return () => this.subscriptions.delete(subscription);
  }

  /** Writes every byte or gives the stream up (closed, the rest dropped); false when it gave up. */
  private append(stream: OutputStreamName, state: StreamState, data: Buffer): boolean {
    try {
      let done = 0;
      while (done < data.length) done += fs.writeSync(state.fd as number, data, done);
      return true;
    } catch (error) {
      // A full or failing disk: what could not be kept is counted as dropped from here on.
      this.logger?.error('turn output could not be kept', {
        turnId: this.turnId,
        stream,
        detail: (error as Error).message,
      });
      fs.closeSync(state.fd as number);
      state.fd = null;
      state.kept = this.files.keptBytes(this.turnId, stream) ?? state.kept;
      return false;
    }
  }

  private async replay(subscription: Subscription): Promise<void> {
    const handles = new Map<OutputStreamName, fs.promises.FileHandle>();
    try {
      for (;;) {
        if (subscription.subscriber.gone() || !this.subscriptions.has(subscription)) return;
        // Which stream is the reader behind on, checked after every await: the switch to live
        // happens in the same step as the last check, so no byte is missed or sent twice.
        const behind = this.streams.find(
          (stream) => (subscription.sent.get(stream) ?? 0) < (this.state.get(stream)?.kept ?? 0),
        );
        if (behind === undefined) break;
        await subscription.subscriber.drained();
        let handle = handles.get(behind);
        if (handle === undefined) {
          handle = await fs.promises.open(this.filePath(behind), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
          handles.set(behind, handle);
        }
        const from = subscription.sent.get(behind) ?? 0;
        const wanted = Math.min(REPLAY_CHUNK_BYTES, (this.state.get(behind)?.kept ?? 0) - from);
        const { bytesRead, buffer } = await handle.read(Buffer.alloc(wanted), 0, wanted, from);
        if (bytesRead === 0) throw new Error(`${behind}: the file ends before the ${from + wanted} bytes kept`);
        if (subscription.subscriber.gone() || !this.subscriptions.has(subscription)) return;
        subscription.sent.set(behind, from + bytesRead);
        subscription.subscriber.deliver({ type: 'output', stream: behind, data: buffer.subarray(0, bytesRead) });
      }
      // Caught up with the files: what the streams wrote past them was not kept, and is said so.
      for (const stream of this.streams) {
        const sent = subscription.sent.get(stream) ?? 0;
        const written = this.state.get(stream)?.written ?? 0;
        if (written <= sent) continue;
        subscription.sent.set(stream, written);
        subscription.subscriber.deliver({ type: 'dropped', stream, bytes: written - sent });
      }
      subscription.live = true;
      if (this.exit !== null) subscription.subscriber.deliver({ type: 'exit', result: this.exit });
    } finally {
      for (const handle of handles.values()) await handle.close();
    }
  }
}

/** What an attachment controls beyond the output: the running turn's input and terminal. */
export interface AttachmentControls {
  write: TurnAttachment['write'];
  endInput: TurnAttachment['endInput'];
  resize: TurnAttachment['resize'];
  signal: TurnAttachment['signal'];
  /** Stops reading the command's output until the returned release (null: nothing to hold). */
  holdOutput(): (() => void) | null;
}

/** The controls of a turn that has ended: input is refused, the rest does nothing. */
export const ENDED_TURN_CONTROLS: AttachmentControls = {
  write: () => fail('input_closed', 'the turn has finished'),
  endInput: () => fail('input_closed', 'the turn has finished'),
  resize: () => undefined,
  signal: () => undefined,
  holdOutput: () => null,
};

/** An attachment to a turn's output from `offsets`, with the turn's controls. */
export function outputAttachment(
  output: TurnOutput,
  offsets: OutputOffsets,
  controls: AttachmentControls,
): TurnAttachment {
  let unsubscribe: (() => void) | null = null;
  let releaseOutput: (() => void) | null = null;
  let detached = false;
  const resumeOutput = (): void => {
    releaseOutput?.();
    releaseOutput = null;
  };
  return {
    onEvent: (listener, flow) => {
      unsubscribe?.();
      unsubscribe = output.subscribe(
        { deliver: listener, drained: () => flow?.drained() ?? Promise.resolve(), gone: () => detached },
        offsets,
      );
    },
    write: controls.write,
    endInput: controls.endInput,
    resize: controls.resize,
    signal: controls.signal,
    pauseOutput: () => {
      releaseOutput ??= controls.holdOutput();
    },
    resumeOutput,
    detach: () => {
      detached = true;
      resumeOutput();
      unsubscribe?.();
      unsubscribe = null;
    },
  };
}
