#!/usr/bin/env bash
# `make vm-test`: boots the guest image with real systemd and cgroup v2, runs the supervisor from
# this checkout as user turnhost in a Delegate=yes unit with the setuid identity helper, runs
# test/vm/guest/*.test.mjs inside, and prints their TAP. Exit 0 when every guest test passed or,
# outside CI, the image could not be downloaded (SKIPPED), 1 otherwise. docs/vm-tier.md explains
# the parts.
set -uo pipefail
VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_TIER=vm-test
# shellcheck source=lib.sh
. "$VM_DIR/lib.sh"

WORKER_UID_FIRST=200000
WORKER_UID_COUNT=1000

require_built_checkout() {
  local missing=() file
  for file in dist/supervisor/cli/main.js worker/build/turnhost-worker identity-helper/build/identity-helper; do
    [ -e "$REPO_DIR/$file" ] || missing+=("$file")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "vm-test: missing ${missing[*]}: run 'make build' first (make vm-test does)" >&2
    exit 1
  fi
}

# What the guest needs from this checkout, written into the run's overlay (never the image).
install_turnhost_setup() {
  local root=$1 gid
  chroot "$root" groupadd --system turnhost
  chroot "$root" useradd --system --gid turnhost --home-dir /var/lib/turnhost --no-create-home \
    --shell /usr/sbin/nologin turnhost
  echo "turnhost:$WORKER_UID_FIRST:$WORKER_UID_COUNT" >>"$root/etc/subuid"
  gid=$(chroot "$root" getent group turnhost | cut -d: -f3)

  # install(1) chowns before it chmods, so the setuid bit survives.
  install -D -o 0 -g "$gid" -m 4750 "$REPO_DIR/identity-helper/build/identity-helper" \
    "$root/usr/local/libexec/turnhost/identity-helper"
  install -D -o 0 -g 0 -m 0644 "$GUEST_DIR/identity-helper.conf" "$root/etc/turnhost/identity-helper.conf"
  install -D -o 0 -g 0 -m 0644 "$GUEST_DIR/turnhost.json" "$root/etc/turnhost/turnhost.json"

  vm_enable_guest_unit "$root" turnhost-vmtest.service
  install -d -m 1777 "$root/srv/vmwork"

  # The shared_uid supervisor (shared-uid.test.mjs starts it): no helper, the same user.
  install -D -o 0 -g 0 -m 0644 "$GUEST_DIR/turnhost-shared.json" "$root/etc/turnhost/turnhost-shared.json"
  install -o 0 -g 0 -m 0644 "$GUEST_DIR/turnhost-vmtest-shared.service" \
    "$root/etc/systemd/system/turnhost-vmtest-shared.service"
  install -d -m 1777 "$root/srv/vmwork-shared"
  mkdir -p "$root/var/lib/turnhost-shared"
  echo "tmpfs /var/lib/turnhost-shared tmpfs mode=0700,uid=$(chroot "$root" id -u turnhost),gid=$gid,size=64m 0 0" \
    >>"$root/etc/fstab"
  vm_install_suite_setup "$root" "mode=0700,uid=$(chroot "$root" id -u turnhost),gid=$gid,size=256m"
}

main() {
  vm_require_root vm-test
  require_built_checkout
  vm_start_run
  vm_log "image $IMAGE"
  install_turnhost_setup "$RUN_DIR/root"
  vm_boot_and_report vm-test install_turnhost_setup
}

main "$@"
