/** Exit codes of the `turnhost` CLI (docs/cli.md). Distinct, so scripts can tell outcomes apart. */
export const EXIT = {
  ok: 0,
  failed: 1,
  usage: 2,
  notFound: 3,
  /** `check`: ordinary mode or configured workspace turns unavailable; any command: the token was refused (401). */
  unavailable: 4,
  serverNotRunning: 5,
  /** `run`: the worker host refused the turn (worker_host_unsupported / launch_refused). */
  refused: 6,
  /** `run`: the concurrent-turn cap is reached (429). */
  capacity: 7,
  /** `run`: the turn id is already used (409). */
  conflict: 8,
  /** `run`: the turn hit its wall-clock timeout (as coreutils timeout). */
  timeout: 124,
  /** `run`: the turn was cancelled. */
  cancelled: 125,
} as const;

export class CliExit extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}
