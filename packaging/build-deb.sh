#!/usr/bin/env bash
# Builds dist/turnhost_<version>_<arch>.deb (docs/packaging.md). Run from anywhere; needs the
# checkout's devDependencies (tsc), the npm registry (or a warm npm cache), gcc/make, dpkg-dev
# (dpkg-shlibdeps) and binutils (strip).
#
# TURNHOST_DEB_NATIVE=rebuild compiles better-sqlite3 in the staging tree (~1-2
# min). The default reuses the checkout's compiled addons when their package version matches
# the staged one and this node loads them (same machine, same Node ABI), else rebuilds.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
packaging=$repo/packaging
node_version=$(node -p 'process.versions.node')
node_major=${node_version%%.*}
version=$(node -p "require('$repo/package.json').version")-${TURNHOST_DEB_REVISION:-1}
arch=$(dpkg --print-architecture)
out=$repo/dist/turnhost_${version}_${arch}.deb
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(stat -c %Y "$packaging/debian/changelog")}

work=$(mktemp -d /tmp/turnhost-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/root
code=$root/usr/lib/turnhost
doc=$root/usr/share/doc/turnhost
log() { echo "build-deb: $*" >&2; }

stage_javascript() {
  log "compiling TypeScript into the staging tree"
  (cd "$repo" && npx tsc -p tsconfig.json --outDir "$code/dist" --sourceMap false)
  rm -rf "$code/dist/bench"
  install -m 0644 "$repo/package.json" "$repo/package-lock.json" "$code/"
  install -d "$code/bin"
  sed '1s|^#!.*|#!/usr/bin/node|' "$repo/bin/turnhost" > "$code/bin/turnhost"
  chmod 0755 "$code/bin/turnhost"
  install -d "$root/usr/bin"
  ln -s ../lib/turnhost/bin/turnhost "$root/usr/bin/turnhost"
}

# Prints the checkout's addon file when it can stand in for a fresh build of package $1.
reusable_addon() {
  local name=$1 addon=$2
  local checkout_module=$repo/node_modules/$name
  local file=$checkout_module/build/Release/$addon
  [ "${TURNHOST_DEB_NATIVE:-reuse}" != rebuild ] || return 1
  [ -f "$file" ] || return 1
  local ours theirs
  ours=$(node -p "require('$code/node_modules/$name/package.json').version")
  theirs=$(node -p "require('$checkout_module/package.json').version")
  [ "$ours" = "$theirs" ] || return 1
  node -e 'require(process.argv[1])' "$file" 2>/dev/null || return 1
  echo "$file"
}

stage_node_modules() {
  log "npm ci --omit=dev into the staging tree"
  (cd "$code" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --prefer-offline --loglevel=error)
  local name addon file
  for pair in better-sqlite3:better_sqlite3.node; do
    name=${pair%%:*} addon=${pair#*:}
    if file=$(reusable_addon "$name" "$addon"); then
      log "$name: reusing $file (same version, loads under node $node_version)"
      install -D -m 0755 "$file" "$code/node_modules/$name/build/Release/$addon"
    else
      log "$name: building for node $node_version"
      (cd "$code" && npm rebuild "$name" --foreground-scripts --loglevel=error)
    fi
  done
  # koffi ships prebuilt binaries as an optional platform package; nothing to build.
}

# Keeps what runs: drops sources, build intermediates, other platforms' binaries and docs.
prune_node_modules() {
  local modules=$code/node_modules
  find "$modules/better-sqlite3/build" -mindepth 1 -maxdepth 1 ! -name Release -exec rm -rf {} +
  find "$modules/better-sqlite3/build/Release" -mindepth 1 ! -name better_sqlite3.node -exec rm -rf {} +
  rm -rf "$modules/better-sqlite3/deps" "$modules/better-sqlite3/src" "$modules/better-sqlite3/binding.gyp" \
    "$modules/koffi/src/cnoke" "$modules/koffi/doc" "$modules/koffi/vendor" "$modules/koffi/cnoke.cjs"
  find "$modules/@koromix" -mindepth 2 -maxdepth 2 -type d -name 'musl_*' -exec rm -rf {} +
  # TypeScript sources too (ajv ships its lib/*.ts beside the compiled dist/): node runs only the JS.
  find "$modules" \( -name '*.md' -o -name '*.markdown' -o -name '*.ts' -o -name '*.mts' \
    -o -name '*.cts' -o -name '*.map' -o -name '*.gyp' -o -name '*.gypi' -o -name '.*' \) \
    ! -path "$modules" -exec rm -rf {} +
  find "$modules" \( -name '*.c' -o -name '*.cc' -o -name '*.cpp' -o -name '*.h' -o -name '*.hh' \
    -o -name '*.inc' -o -name '*.def' -o -name '*.S' -o -name '*.asm' -o -name CMakeLists.txt \
    -o -name help.txt \) -type f -delete
  find "$modules" -mindepth 2 -maxdepth 3 -type d \( -name test -o -name tests -o -name example \
    -o -name examples \) -path '*/node_modules/*' -prune -exec rm -rf {} +
  find "$modules" -depth -type d -empty -delete
  find "$modules" -name '*.node' -exec strip --strip-unneeded --remove-section=.comment \
    --remove-section=.note {} +
  check_native_modules
}

# Loads every native module from the pruned staging tree under this node.
check_native_modules() {
  (cd "$code" && node -e '
    const Database = require("better-sqlite3");
    new Database(":memory:").prepare("select 1 as one").get();
    require("koffi").load("libc.so.6");
  ') || { log "the staged native modules do not load under node $node_version"; exit 1; }
}

stage_helper() {
  log "building the identity helper"
  # Compiled afresh with the installed config path spelled out (a build/identity-helper left
  # by a development build may carry another path).
  make -s -C "$repo/identity-helper" custom CUSTOM_CONFIG_PATH=/etc/turnhost/identity-helper.conf \
    CUSTOM_OUT="$code/identity-helper"
  # Shipped 0755 root:root: group turnhost does not exist at unpack time. postinst applies
  # root:turnhost 4750 through dpkg-statoverride, which dpkg re-applies on every upgrade.
  chmod 0755 "$code/identity-helper"
  strip --strip-unneeded --remove-section=.comment "$code/identity-helper"
  log "building the turn worker"
  make -s -C "$repo/worker" all
  install -m 0755 "$repo/worker/build/turnhost-worker" "$code/turnhost-worker"
  strip --strip-unneeded --remove-section=.comment "$code/turnhost-worker"
  # The attack battery (turnhost check --attack): static, so it runs in any view; where the
  # supervisor looks for it under its package root.
  make -s -C "$repo/attack" all
  install -D -m 0755 "$repo/attack/build/attack-battery" "$code/attack/build/attack-battery"
  strip --strip-unneeded --remove-section=.comment "$code/attack/build/attack-battery"
}

stage_system_files() {
  install -D -m 0644 "$packaging/turnhost.service" "$root/lib/systemd/system/turnhost.service"
  install -D -m 0644 "$packaging/turnhost.json" "$root/etc/turnhost/turnhost.json"
  # The configuration's JSON Schema, which the shipped file names for editors.
  install -D -m 0644 "$repo/docs/config.schema.json" "$root/usr/share/turnhost/config.schema.json"
  install -D -m 0644 "$packaging/identity-helper.conf" "$root/etc/turnhost/identity-helper.conf"
  install -D -m 0644 "$packaging/turnhost.tmpfiles" "$root/usr/lib/tmpfiles.d/turnhost.conf"
  install -d "$root/usr/share/man/man8" "$doc" "$root/usr/share/lintian/overrides"
  gzip -9n < "$packaging/turnhost.8" > "$root/usr/share/man/man8/turnhost.8.gz"
  gzip -9n < "$packaging/debian/changelog" > "$doc/changelog.Debian.gz"
  install -m 0644 "$repo/docs/operator.md" "$doc/operator.md"
  # The status page's files (supervisor/http/status-page.ts serves them from here).
  install -d "$code/ui"
  install -m 0644 "$repo"/ui/*.html "$repo"/ui/*.js "$repo"/ui/*.css "$code/ui/"
  # Generated from the CLI's own option table (turnhost completion), by the staged code itself.
  install -d "$root/usr/share/bash-completion/completions"
  env -i PATH=/usr/bin:/bin node "$code/dist/supervisor/cli/main.js" completion \
    > "$root/usr/share/bash-completion/completions/turnhost"
  node "$packaging/copyright.mjs" "$code" "$packaging/debian/copyright.in" \
    "$packaging/debian/copyright.tail" > "$doc/copyright"
  install -m 0644 "$packaging/lintian-overrides" "$root/usr/share/lintian/overrides/turnhost"
}

# Directories 0755; files 0644, except our own executables and, among the bundled modules,
# scripts that start with "#!" (native addons are loaded, never executed: 0644).
normalise_tree() {
  find "$root" -type d -exec chmod 0755 {} +
  find "$root" -type f -exec chmod 0644 {} +
  chmod 0755 "$code/bin/turnhost" "$code/identity-helper" "$code/turnhost-worker" "$code/attack/build/attack-battery"
  local file
  while IFS= read -r -d '' file; do
    if [ "$(head -c2 "$file")" = '#!' ]; then chmod 0755 "$file"; fi
  done < <(find "$code/node_modules" -type f ! -name '*.node' -print0)
  find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

# Shared-library dependencies of every ELF file, as dpkg-shlibdeps computes them.
shlibs_depends() {
  local elves
  mapfile -t elves < <(find "$root" -type f \( -name '*.node' -o -path '*/identity-helper' \))
  mkdir -p "$work/shlibs/debian"
  printf 'Source: turnhost\n\nPackage: turnhost\nArchitecture: any\n' > "$work/shlibs/debian/control"
  (cd "$work/shlibs" && dpkg-shlibdeps -O "${elves[@]}" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
}

write_control() {
  local depends installed_size
  depends=$(shlibs_depends)
  [ -n "$depends" ] || { log "dpkg-shlibdeps found no library dependencies"; exit 1; }
  install -d -m 0755 "$root/DEBIAN"
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
    xargs -0 md5sum) > "$root/DEBIAN/md5sums"
  installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
  sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@INSTALLED_SIZE@|$installed_size|" \
    -e "s|@NODE_DEPENDS@|nodejs (>= $node_major), nodejs (<< $((node_major + 1)))|" \
    -e "s|@SHLIBS_DEPENDS@|$depends|" "$packaging/debian/control.in" > "$root/DEBIAN/control"
  install -m 0644 "$packaging/debian/conffiles" "$root/DEBIAN/conffiles"
  install -m 0755 "$packaging/debian/postinst" "$packaging/debian/prerm" "$packaging/debian/postrm" "$root/DEBIAN/"
  chmod 0644 "$root/DEBIAN/md5sums"
}

started=$(date +%s)
install -d "$code" "$repo/dist"
stage_javascript
stage_node_modules
prune_node_modules
stage_helper
stage_system_files
normalise_tree
write_control
# Renamed into place: a reader never sees a half-written package.
dpkg-deb --root-owner-group -Zxz --build "$root" "$work/package.deb" >/dev/null
mv -f "$work/package.deb" "$out"
log "wrote $out ($(du -h "$out" | cut -f1), $(($(date +%s) - started)) s)"
