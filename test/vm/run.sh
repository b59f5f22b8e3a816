#!/usr/bin/env bash
# `make vm-test`: boots the guest image with real systemd and cgroup v2, runs the supervisor from
# this checkout as user turnhost in a Delegate=yes unit with the setuid identity helper, runs
# test/vm/guest/*.test.mjs inside, and prints their TAP. Exit 0 when every guest test passed or
# the image could not be downloaded (SKIPPED), 1 otherwise. docs/vm-tier.md explains the parts.
set -uo pipefail
VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$VM_DIR/lib.sh"

GUEST_DIR=$VM_DIR/guest
BOOT_TIMEOUT_SECONDS=${TURNHOST_VM_TIMEOUT:-900}
WORKER_UID_FIRST=200000
WORKER_UID_COUNT=1000

require_built_checkout() {
  local missing=() file
  for file in dist/supervisor/cli.js dist/worker/main.js identity-helper/build/identity-helper; do
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
  install -m 0755 "$(readlink -f "$(command -v node)")" "$root/usr/local/bin/node"
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

  local unit
  for unit in turnhost-vmtest.service turnhost-vmtest-suite.service; do
    install -o 0 -g 0 -m 0644 "$GUEST_DIR/$unit" "$root/etc/systemd/system/$unit"
    mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
    ln -sf "/etc/systemd/system/$unit" "$root/etc/systemd/system/multi-user.target.wants/$unit"
  done

  mkdir -p "$root/turnhost" "$root/vmresults" "$root/var/lib/turnhost"
  install -d -m 1777 "$root/srv/vmwork"
  # The data dir is a tmpfs: SQLite's WAL needs shared writable mmap, which 9p does not give.
  cat >>"$root/etc/fstab" <<EOF
turnhost /turnhost 9p trans=virtio,version=9p2000.L,msize=524288,ro,cache=loose 0 0
vmresults /vmresults 9p trans=virtio,version=9p2000.L,msize=524288,rw 0 0
tmpfs /var/lib/turnhost tmpfs mode=0700,uid=$(chroot "$root" id -u turnhost),gid=$gid,size=256m 0 0
EOF
}

main() {
  [ "$(id -u)" -eq 0 ] || { echo "vm-test: must run as root" >&2; exit 1; }
  require_built_checkout
  vm_lock_run_dir

  vm_require_image
  vm_log "image $IMAGE"
  vm_prepare_run_dir
  trap vm_release_run_dir EXIT
  install_turnhost_setup "$RUN_DIR/root"
  vm_log "booting (TCG, no KVM; timeout ${BOOT_TIMEOUT_SECONDS}s; serial log $RUN_DIR/serial.log)"
  local boot_started=$SECONDS
  vm_boot "$BOOT_TIMEOUT_SECONDS"
  local booted=$?
  vm_log "guest ran $((SECONDS - boot_started))s"
  vm_release_run_dir
  vm_report_results
  local failures=$?
  if [ "$booted" -eq 124 ]; then
    echo "vm-test: FAILED: the guest did not power off within ${BOOT_TIMEOUT_SECONDS}s (serial log: $RUN_DIR/serial.log)"
    exit 1
  fi
  [ "$failures" -eq 0 ] && { echo "vm-test: all guest tests passed"; exit 0; }
  echo "vm-test: FAILED (serial log: $RUN_DIR/serial.log, guest journal: $RUN_DIR/results/journal.txt)"
  exit 1
}

main "$@"
