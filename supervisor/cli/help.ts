/** The usage texts of `turnhost --help` and of each `turnhost <command> --help`. */

const CLIENT_OPTIONS_HELP = `client options:
  --server URL      http://HOST:PORT or unix:/PATH (default: the configured listener)
  --data-dir DIR    where the API token is read (default: the configured data directory)
  --config FILE     the configuration that names the listener and data directory`;

const EXIT_CODES_HELP = `exit codes: 0 ok, 1 failed, 2 usage, 3 not found, 4 unavailable/unauthenticated, 5 no server,
            6 refused, 7 capacity, 8 conflict; run: the command's code, 128+signal, 124 timeout, 125 cancelled`;

export const USAGE = `usage: turnhost <command> [options]
       turnhost <command> --help
       turnhost --version

  serve   [--config FILE] [--listen HOST:PORT] [--socket PATH] [--data-dir DIR] [--log-level L]
  status  [--json]                       what the running supervisor reports
  check   [--attack] [--json]            re-run the worker-host probes (exit 4 when ordinary or workspace turns are unavailable)
  drain   [--off] [--json]               refuse new turns (running ones end as they would); --off takes them again
  events  [--session S] [--turn T] [--kind K] [--after ID | --desc [--before ID]] [--limit N] [--follow] [--json]
  run     [--mode M] [--tty] [--timeout S] [--cwd DIR] [--env K=V]... [--allow HOST]...
          [--limit NAME=VALUE]... [--session S] [--turn-id ID] [--workspace ID] [--json] [--local] -- CMD ARGS...
  workspace create [ID] [--session S] | list [--session S] | show ID | delete ID [--cancel]  [--json]
  workspace files ls ID [PATH] | get ID PATH [LOCAL] | put ID PATH [LOCAL] | rm ID PATH [--recursive] | mkdir ID PATH
                | push ID DIR [TAR] | pull ID [DIR] [TAR]
  turns   list [--session S] [--workspace W] [--state S] [--limit N] [--all] | show ID | cancel ID | attach ID
  session list [--limit N] [--all] | delete ID   list sessions; delete a session's events and turn records
  completion                             print the bash completion script

client options: --server URL (http://HOST:PORT or unix:/PATH), --data-dir DIR, --config FILE
${EXIT_CODES_HELP}
`;

export const COMMAND_HELP: Record<string, string> = {
  serve: `usage: turnhost serve [--config FILE] [--listen HOST:PORT|none] [--socket PATH|none] [--data-dir DIR] [--log-level L]

Runs the supervisor in the foreground (the systemd unit runs it), logging JSON lines to stderr.
SIGHUP re-reads the configuration and applies what can change live; SIGTERM and SIGINT stop it.

  --config FILE       configuration file (default: /etc/turnhost/turnhost.json when installed)
  --listen HOST:PORT  loopback TCP listener, or none
  --socket PATH       unix socket listener, or none
  --data-dir DIR      database, API token and fallback log
  --log-level L       debug, info, warn or error
`,
  status: `usage: turnhost status [--json] [client options]

Prints what the running supervisor reports: software, host, event store, worker host (per mode,
identity, limits), prepared workers. --json prints the GET /api/status answer (sizes in bytes).

${CLIENT_OPTIONS_HELP}
`,
  check: `usage: turnhost check [--attack] [--json] [client options]

Re-runs the worker-host probes and prints, per mode (and for workspace turns when workspaces
are configured), whether it is available and otherwise the missing requirement. Exits 4 when
ordinary mode, or configured workspace turns, are unavailable.

--attack also runs the attack battery as a turn in each available mode and prints every case
(held, broken or skipped, with its evidence); a broken case makes its mode unavailable, naming
the case (docs/probes.md, "Attack battery").

${CLIENT_OPTIONS_HELP}
`,
  drain: `usage: turnhost drain [--off] [--json] [client options]

Turns drain mode on: the supervisor refuses new turns (503 draining; GET /api/ready answers 503
draining, so a load balancer or a host application places turns elsewhere) and lets running ones
end as they would. --off takes new turns again. SIGUSR2 to the supervisor turns it on too.
Prints the mode and the room left; each change is a host_drain event.

${CLIENT_OPTIONS_HELP}
`,
  events: `usage: turnhost events [--session S] [--turn T] [--kind K] [--after ID | --desc [--before ID]] [--limit N] [--follow] [--json] [client options]

Lists governance events, oldest first (--desc: newest first); --follow streams new ones until
interrupted.

  --session S   only this session's events
  --turn T      only this turn's events
  --kind K      only this kind (worker_launch, egress_denial, ...)
  --after ID    events with a larger id (with --follow: replay those first); not with --desc
  --desc        newest first; the next, older page with --before
  --before ID   with --desc: events with a smaller id
  --limit N     at most N events (1-1000, default 100); not with --follow
  --follow, -f  stream new events over the WebSocket
  --json        one JSON document (--follow: one event per line)

${CLIENT_OPTIONS_HELP}
`,
  run: `usage: turnhost run [options] -- CMD ARGS...

Runs one turn through the running supervisor and exits with the command's exit code. When the
command ends, stderr also says why it did not start and which egress the proxy denied. Ctrl-C
goes to the command; a second Ctrl-C within 3 s cancels the turn.

  --mode M            ordinary (default) or restricted
  --tty               a pseudo-terminal of this terminal's size
  --timeout S         seconds before the turn is stopped
  --cwd DIR           working directory inside a workspace root (default: the current directory);
                      with --workspace, a path relative to the workspace (default: its top)
  --workspace ID      run in workspace ID, as its uid (turnhost workspace create)
  --env K=V           a variable for the command, passed as given (repeatable); names the
                      supervisor owns are refused: LD_*, GLIBC_TUNABLES, the proxy variables
                      (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY in any case), TMPDIR,
                      NODE_USE_ENV_PROXY, TURNHOST_*, the model client variables
                      (ANTHROPIC_/OPENAI_ BASE_URL and API_KEY, ANTHROPIC_AUTH_TOKEN) and
                      GIT_CONFIG_*. This shell's environment is not passed.
  --allow HOST        an allowlist addition the configuration permits (repeatable)
  --limit NAME=VALUE  a lower limit for this turn, e.g. memory=512M (repeatable)
  --session S         the session id (default: cli-<random>)
  --turn-id ID        the turn id (default: generated)
  --json              print only { turnId, ...TurnResult }
  --local             run in-process without a server (refused while one holds the data directory)

${CLIENT_OPTIONS_HELP}
${EXIT_CODES_HELP}
`,
  workspace: `usage: turnhost workspace create [ID] [--session S] [--json] [client options]
       turnhost workspace list [--session S] [--json] [client options]
       turnhost workspace show ID [--json] [client options]
       turnhost workspace delete ID [--cancel] [--json] [client options]
       turnhost workspace files ls|get|put|rm|mkdir|push|pull ID [PATH] [LOCAL] [--recursive] [--json] [client options]

Workspaces: a directory that outlives turns and, with the identity helper, a worker uid leased
to it for its whole life (docs/workspaces.md). Run a turn in one with \`turnhost run --workspace ID\`.

  create [ID]   make a workspace (an id is generated when none is given); prints its id
  list          every workspace (--session: those bound to that session)
  show ID       one workspace with its usage (bytes, files) and running turns
  delete ID     remove it, its files and its uid lease; refused (exit 8) while a turn runs on it
  files ls ID [PATH]          list a directory of the workspace (default its top)
  files get ID PATH [LOCAL]   download a file (to LOCAL, else stdout)
  files put ID PATH [LOCAL]   upload LOCAL (absent or -: stdin); missing parents are made, the workspace's
  files rm ID PATH            remove a file, link or empty directory (--recursive: a tree)
  files mkdir ID PATH         make a directory with its parents, the workspace's
  files push ID DIR [TAR]     extract a tar archive (absent or -: stdin) into DIR (. the top): files and
                              directories only; a link, device or .. name stops it at that entry
  files pull ID [DIR] [TAR]   download DIR (default the top) as a tar archive (to TAR, else stdout)
  --session S   create: bind it to session S (deleted with the session); list: filter
  --cancel      delete: cancel the workspace's running turns first, and wait for them to end
  --json        print the API's JSON answer

${CLIENT_OPTIONS_HELP}
${EXIT_CODES_HELP}
`,
  turns: `usage: turnhost turns <list|show|cancel|attach> [options] [ID]

  list [--session S] [--workspace W] [--state S] [--limit N] [--all]   the turns, newest first
  show ID                                             one turn's record
  cancel ID                                           stop a running turn
  attach ID                                           follow a turn's output, as run does

turnhost turns <subcommand> --help shows its options.
`,
  'turns list': `usage: turnhost turns list [--session S] [--workspace W] [--state S] [--limit N] [--all] [--json] [client options]

Lists turn records, newest first, one per line: id, session, state, result, created.

  --session S   only this session's turns
  --workspace W only the turns that ran in workspace W
  --state S     only turns in this state: starting, running or finished
  --limit N     at most N turns per page (1-1000, default 100)
  --all         every page, not only the first
  --json        { turns, nextAfter } (with --all, every turn and a null nextAfter)

${CLIENT_OPTIONS_HELP}
`,
  'turns show': `usage: turnhost turns show ID [--json] [client options]

Prints one turn's record (state, mode, identity, result). Exits 3 for an unknown turn.

${CLIENT_OPTIONS_HELP}
`,
  'turns cancel': `usage: turnhost turns cancel ID [--json] [client options]

Stops a running turn (its result becomes cancelled). Exits 3 for an unknown turn and 8 when it
has already finished.

${CLIENT_OPTIONS_HELP}
`,
  'turns attach': `usage: turnhost turns attach ID [--no-input] [--json] [client options]

Follows a turn as run does: its output (the kept backlog first), then its exit code. Input is
forwarded, and the end of this command's input ends the turn's (use --no-input to only watch);
a pty turn puts this terminal in raw mode.

  --no-input    forward neither input nor its end
  --json        print only { turnId, ...TurnResult }

${CLIENT_OPTIONS_HELP}
${EXIT_CODES_HELP}
`,
  session: `usage: turnhost session list [--limit N] [--all] [--json] [client options]
       turnhost session delete ID [--json] [client options]

turnhost session list --help and turnhost session delete --help show their options.
`,
  'session list': `usage: turnhost session list [--limit N] [--all] [--json] [client options]

Lists sessions, the most recently begun first: each with its turn, workspace and event counts
and its first and last activity.

  --limit N     sessions per page (1-1000, default 100)
  --all         follow every page
  --json        { sessions, nextAfter }

${CLIENT_OPTIONS_HELP}
`,
  'session delete': `usage: turnhost session delete ID [--json] [client options]

Deletes the session's events and turn records and prints the counts; a session_deleted event
records it. Exits 3 for an unknown session and 8 while a turn of it runs (nothing is deleted).

${CLIENT_OPTIONS_HELP}
`,
  completion: `usage: turnhost completion

Prints the bash completion script (the package installs it as
/usr/share/bash-completion/completions/turnhost).
`,
};
