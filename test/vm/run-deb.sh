#!/usr/bin/env bash
# `make vm-deb-test`: the installed-package test. Boots the cached guest image with
# the packages the built deb depends on installed in the run's overlay and the deb beside them;
# test/vm/guest/deb.test.mjs installs it with dpkg, checks the running unit, `turnhost check`, a turn, then remove and
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
  vm_install_deb_dependencies "$1" "$GUEST_DEB_DIR"
  install_guest_setup "$1"
}

main() {
  vm_require_root vm-deb-test
  vm_find_deb
  vm_start_run
  vm_log "image $IMAGE, deb $DEB"
  prepare_overlay "$RUN_DIR/root"
  vm_boot_and_report vm-deb-test prepare_overlay
}

main "$@"
