#!/usr/bin/env bash
# `npm ci` with a word first about what it is doing: on a fresh machine it can run for minutes
# without printing anything, almost all of it compiling a native module from source.
#
# The native modules (package.json "allowScripts"): koffi takes its prebuilt binary from an npm
# package, better-sqlite3 fetches a prebuilt binary from its own release downloads and compiles
# SQLite from source when it cannot (a few minutes). Whether that fetch can work is not probed
# here: this script reaches no host of its own; npm's install scripts decide.
set -uo pipefail
cd "$(dirname "$0")/.."

say() { echo "npm-ci: $*" >&2; }

started=$SECONDS
say "installing node_modules from package-lock.json (npm ci prints nothing until it is done)"
if [ "${npm_config_build_from_source:-}" = "true" ]; then
  say "compiling better-sqlite3 from source (npm_config_build_from_source is set): a few minutes"
else
  say "better-sqlite3: a prebuilt binary if its download is reachable, else compiling from source: a few minutes"
fi
npm ci --no-audit --no-fund
status=$?
if [ "$status" -eq 0 ]; then
  say "done in $((SECONDS - started)) s"
else
  say "npm ci failed (exit $status) after $((SECONDS - started)) s"
fi
exit "$status"
