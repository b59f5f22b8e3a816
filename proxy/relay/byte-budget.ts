/**
 * A turn's byte allowance, shared between the proxy's event loop (forward requests) and the
 * kernel relay thread (spliced tunnels): one counter in shared memory, added to atomically,
 * so the cap holds across both without a round trip between threads.
 */
export class ByteBudget {
  readonly shared: SharedArrayBuffer;
  private readonly used: BigInt64Array;

  constructor(
    readonly maxBytes: number,
    shared?: SharedArrayBuffer,
  ) {
    if (!Number.isSafeInteger(maxBytes) || maxBytes < 1)
      throw new RangeError('maxBytes must be a positive safe integer');
    this.shared = shared ?? new SharedArrayBuffer(BigInt64Array.BYTES_PER_ELEMENT);
    this.used = new BigInt64Array(this.shared);
  }

  usedBytes(): number {
    return Number(Atomics.load(this.used, 0));
  }

  /** Adds `bytes` and answers whether the turn is now over its allowance. */
  charge(bytes: number): { total: number; over: boolean } {
    const total = Number(Atomics.add(this.used, 0, BigInt(bytes))) + bytes;
    return { total, over: total > this.maxBytes };
  }

  /** Bytes that may still move; one more than this exceeds the cap. */
  remaining(): number {
    return Math.max(0, this.maxBytes - this.usedBytes());
  }
}
