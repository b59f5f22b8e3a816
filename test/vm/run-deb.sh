#!/usr/bin/env bash
# `make vm-deb-test`: the installed-package test. Boots the cached guest image with
# the built deb and the packages it depends on in the run's overlay; test/vm/guest/deb.test.mjs
# installs them with dpkg, checks the running unit, `turnhost check`, a turn, then remove and
# purge. Exit 0 when every guest test passed or, outside CI, a download failed (SKIPPED), 1
# otherwise.
# docs/vm-tier.md ("The installed-package run") explains the parts.
set -uo pipefail
VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_RUN_NAME=run-deb
VM_TIER=vm-deb-test
# shellcheck source=lib.sh
. "$VM_DIR/lib.sh"

# Where the guest finds what it installs (deb.test.mjs reads the same paths).
GUEST_DEB_DIR=/root/vm-debs

# The deb under test: TURNHOST_DEB, else the newest dist/turnhost_*.deb.
find_deb() {
  local deb=${TURNHOST_DEB:-}
  [ -n "$deb" ] || deb=$(ls -t "$REPO_DIR"/dist/turnhost_*_amd64.deb 2>/dev/null | head -n 1)
  if [ -z "$deb" ] || [ ! -f "$deb" ]; then
    echo "vm-deb-test: no deb: run 'make deb' first (make vm-deb-test does) or set TURNHOST_DEB" >&2
    exit 1
  fi
  DEB=$(readlink -f "$deb")
}

# The guest has no network, and the image lacks some of the deb's dependencies (nodejs and its
# libraries). The image's own apt (trixie sources) resolves them against the deb and downloads them into the run's overlay; the cached image is never written
# and its version stamp stays, so a concurrent run is unaffected.
download_dependencies() {
  local root=$1 log=$RUN_DIR/apt-download.log
  install -D -m 0644 "$DEB" "$root$GUEST_DEB_DIR/$(basename "$DEB")"
  vm_log "downloading the deb's dependencies with the guest's apt (trixie)"
  # update first: the image's lists age, and the mirror drops superseded versions.
  if ! chroot "$root" sh -c "apt-get update -q && apt-get install -y -q --download-only --no-install-recommends $GUEST_DEB_DIR/$(basename "$DEB")" >"$log" 2>&1; then
    tail -5 "$log" >&2
    grep -qiE "failed to fetch|temporary failure resolving|could not resolve|unable to connect|network is unreachable" "$log" &&
      vm_skip "apt-get could not download the deb's dependencies (log: $log)"
    echo "vm-deb-test: resolving the deb's dependencies failed (log: $log)" >&2
    exit 1
  fi
  mkdir -p "$root$GUEST_DEB_DIR/deps"
  mv "$root"/var/cache/apt/archives/*.deb "$root$GUEST_DEB_DIR/deps/"
  vm_log "dependencies: $(cd "$root$GUEST_DEB_DIR/deps" && ls | sed 's/_.*//' | tr '\n' ' ')"
}

# The host's node runs only the test file: the package runs on the distribution's /usr/bin/node.
# postinst and StateDirectory= set the data dir's owner and mode, as on a real disk.
install_guest_setup() {
  local root=$1
  vm_install_suite_setup "$root" mode=0755,size=256m
  mkdir -p "$root/etc/systemd/system/turnhost-vmtest-suite.service.d"
  printf '[Service]\nExecStart=\nExecStart=/bin/sh /turnhost/test/vm/guest/run-suite.sh deb.test.mjs\n' \
    >"$root/etc/systemd/system/turnhost-vmtest-suite.service.d/deb.conf"
}

# Everything a fresh overlay at $1 needs for this run.
prepare_overlay() {
  download_dependencies "$1"
  install_guest_setup "$1"
}

main() {
  vm_require_root vm-deb-test
  find_deb
  vm_start_run
  vm_log "image $IMAGE, deb $DEB"
  prepare_overlay "$RUN_DIR/root"
  vm_boot_and_report vm-deb-test prepare_overlay
}

main "$@"
