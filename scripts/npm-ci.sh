#!/usr/bin/env bash
# `npm ci` with a word first about what it is doing: on a fresh machine it can run for minutes
# without printing anything, almost all of it compiling a native module from source.
#
# The native modules (package.json "allowScripts"): koffi takes its prebuilt binary from an npm
# package (@koromix/koffi-<platform>), node-pty ships no prebuilt binary for Linux and always
# compiles (about half a minute), better-sqlite3 downloads its prebuilt binary from its GitHub
# releases and compiles SQLite from source when that fails (a few minutes). Whether that
# download can work is checked the cheap way before npm starts: one HEAD request, 5 s at most.
set -uo pipefail
cd "$(dirname "$0")/.."

say() { echo "npm-ci: $*" >&2; }

# Prints a line when better-sqlite3 will (or, behind a proxy, may) compile from source, nothing
# when its prebuilt binary for this Node ABI and platform answers. Behind a proxy Node's fetch
# (no proxy support) proves nothing, so it says "if".
better_sqlite3_compile_note() {
  node - <<'EOF'
const lock = JSON.parse(require('node:fs').readFileSync('package-lock.json', 'utf8'));
const version = lock.packages?.['node_modules/better-sqlite3']?.version;
if (!version) process.exit(0);
const asset = `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`;
const url = `https://github.com/WiseLibs/better-sqlite3/releases/download/v${version}/${asset}`;
const compiles = 'better-sqlite3 compiles from source (a few minutes)';
if (process.env.npm_config_build_from_source === 'true') {
  console.log(`${compiles}: npm_config_build_from_source is set`);
} else if (['https_proxy', 'HTTPS_PROXY', 'npm_config_https_proxy'].some((name) => process.env[name])) {
  console.log(`${compiles} if ${asset} cannot be downloaded through the proxy`);
} else {
  fetch(url, { method: 'HEAD', redirect: 'follow', signal: AbortSignal.timeout(5000) }).then(
    (response) => {
      if (!response.ok) console.log(`${compiles}: github.com has no ${asset} (HTTP ${response.status})`);
    },
    (error) => console.log(`${compiles}: its prebuilt ${asset} cannot be downloaded (${error.cause?.code ?? error.name})`),
  );
}
EOF
}

started=$SECONDS
say "installing node_modules from package-lock.json (npm ci prints nothing until it is done)"
say "node-pty compiles from source on Linux (about half a minute)"
note=$(better_sqlite3_compile_note 2>/dev/null)
[ -z "$note" ] || say "$note"
npm ci --no-audit --no-fund
status=$?
if [ "$status" -eq 0 ]; then
  say "done in $((SECONDS - started)) s"
else
  say "npm ci failed (exit $status) after $((SECONDS - started)) s"
fi
exit "$status"
