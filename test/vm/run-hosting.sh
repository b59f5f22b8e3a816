#!/usr/bin/env bash
# `make vm-hosting-test`: the hosting template (packaging/hosting/cloud-init.yaml) on a Debian 13
# guest with Debian's cloud-init and a NoCloud seed directory. Three boots of one overlay, each
# with its own seed (a new instance-id, so cloud-init runs the template again):
#   fresh    the template installs the freshly built deb, writes the configuration, starts the
#            unit and checks it; the host then runs a turn through the API (hosting-host.mjs)
#   change   one variable changed (TURNHOST_MAX_TURNS): only the configuration key it names
#            changes; the host sees the new capacity and runs a turn again
#   failing  a workspaces root the supervisor cannot write (TURNHOST_WORKSPACE_ROOT=/srv):
#            `turnhost check` fails, and so does cloud-init, with the reason in its log
# The guest's side of each boot is test/vm/guest/hosting.test.mjs. Exit 0 when every test
# passed (or, outside CI, a download failed: SKIPPED), 1 otherwise. docs/vm-tier.md explains
# the parts.
set -uo pipefail
VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_RUN_NAME=run-hosting
VM_TIER=vm-hosting-test
# shellcheck source=lib.sh
. "$VM_DIR/lib.sh"

GUEST_DEB_DIR=/root/vm-debs
# The API token a secret agent would put on the host (TURNHOST_TOKEN_SOURCE=file:...).
GUEST_TOKEN_FILE=/etc/turnhost-secrets/api-token
# The guest's address on qemu's user network, where the host's forwarded port arrives.
GUEST_ADDRESS=10.0.2.15
GUEST_API_PORT=7707
PHASES=(fresh change failing)

# The variables every boot sets over the template's defaults, then each phase's change.
variables_for() {
  local phase=$1
  cat <<EOF
TURNHOST_PACKAGE=$GUEST_DEB_DIR/$(basename "$DEB")
TURNHOST_LISTEN=0.0.0.0:$GUEST_API_PORT
TURNHOST_ALLOW_NON_LOOPBACK=true
TURNHOST_UID_COUNT=1000
TURNHOST_WORKSPACE_ROOT=/srv/hosting-workspaces
TURNHOST_WORKSPACE_MAX_BYTES=67108864
TURNHOST_MAX_TURNS=3
TURNHOST_LIMITS='{"memory":"256M","pids":256,"cpu":1}'
TURNHOST_TOKEN_SOURCE=file:$GUEST_TOKEN_FILE
TURNHOST_METRICS_LISTEN=none
EOF
  case "$phase" in
    change) echo "TURNHOST_MAX_TURNS=5" ;;
    failing) echo "TURNHOST_MAX_TURNS=5" && echo "TURNHOST_WORKSPACE_ROOT=/srv" ;;
  esac
}

# The template with the variables of phase $1 in its variables file, as an operator fills it.
user_data_for() {
  local phase=$1 assignments
  assignments=$(variables_for "$phase")
  TEMPLATE=$REPO_DIR/packaging/hosting/cloud-init.yaml ASSIGNMENTS=$assignments python3 -c '
import os, re
text = open(os.environ["TEMPLATE"]).read()
for line in os.environ["ASSIGNMENTS"].splitlines():
    key = line.split("=", 1)[0]
    pattern = re.compile(r"^(      )" + re.escape(key) + r"=.*$", re.M)
    if not pattern.search(text):
        raise SystemExit(f"the template has no variable {key}")
    text = pattern.sub(lambda m: m.group(1) + line, text)
print(text, end="")
'
}

# The seed cloud-init reads at boot (NoCloud, seed directory), for phase $1.
write_seed() {
  local root=$1 phase=$2 seed=$1/var/lib/cloud/seed/nocloud
  mkdir -p "$seed"
  printf 'instance-id: turnhost-hosting-%s\nlocal-hostname: turnhost-hosting\n' "$phase" >"$seed/meta-data"
  user_data_for "$phase" >"$seed/user-data" || { echo "$VM_TIER: filling the template failed" >&2; exit 1; }
  mkdir -p "$root/etc/turnhost-vmtest"
  echo "$phase" >"$root/etc/turnhost-vmtest/phase"
}

# What a cloud image has before user-data runs: Debian's cloud-init configured for the NoCloud
# seed, a network on qemu's user net (set statically: the image has no udev, which networkd
# needs), a disk for the supervisor's data (SQLite's WAL needs shared writable mmap, which the
# 9p root lacks; a disk keeps it across the boots), and the token file a secret agent put.
install_cloud_image_setup() {
  local root=$1 log=$RUN_DIR/cloud-init-install.log
  vm_log "installing Debian's cloud-init into the overlay"
  if ! chroot "$root" sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends cloud-init' >"$log" 2>&1; then
    tail -5 "$log" >&2
    grep -qiE "failed to fetch|temporary failure resolving|could not resolve|unable to connect|network is unreachable" "$log" &&
      vm_skip "apt-get could not download cloud-init (log: $log)"
    echo "$VM_TIER: installing cloud-init failed (log: $log)" >&2
    exit 1
  fi
  install -D -m 0644 "$GUEST_DIR/hosting-cloud.cfg" "$root/etc/cloud/cloud.cfg.d/90-turnhost-vmtest.cfg"
  printf 'virtio_net\nvirtio_blk\n' >"$root/etc/modules-load.d/turnhost-vmtest.conf"
  vm_enable_guest_unit "$root" turnhost-vmtest-network.service
  vm_enable_guest_unit "$root" turnhost-vmtest-datadisk.service
  # No resolver: apt-get update in the guest fails at once instead of waiting on DNS.
  rm -f "$root/etc/resolv.conf"
  : >"$root/etc/resolv.conf"
  install -d -m 0700 "$root$(dirname "$GUEST_TOKEN_FILE")"
  install -m 0600 /dev/null "$root$GUEST_TOKEN_FILE"
  printf '%s' "$API_TOKEN" >"$root$GUEST_TOKEN_FILE"
  truncate -s 512M "$RUN_DIR/data.img"
  mkfs.ext4 -q -F -L turnhost-data "$RUN_DIR/data.img"
}

install_guest_setup() {
  local root=$1
  vm_install_deb_dependencies "$root" "$GUEST_DEB_DIR"
  install_cloud_image_setup "$root"
  # No tmpfs: the data disk holds the supervisor's data here.
  vm_install_suite_setup "$root"
  mkdir -p "$root/etc/systemd/system/turnhost-vmtest-suite.service.d"
  printf '[Service]\nExecStart=\nExecStart=/bin/sh /turnhost/test/vm/guest/run-suite.sh hosting.test.mjs\n' \
    >"$root/etc/systemd/system/turnhost-vmtest-suite.service.d/hosting.conf"
}

# A free loopback port for the guest's API on the host.
free_port() {
  node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'
}

# Boots phase $1 while the host side (hosting-host.mjs) waits for the guest's go-ahead, runs
# its checks through the forwarded port and lets the guest finish. Its TAP and the guest's are
# kept as <name>-<phase>.tap; a boot that did not finish its suite leaves a failing TAP file.
boot_phase() {
  local phase=$1 host_pid results=$RUN_DIR/results
  write_seed "$RUN_DIR/root" "$phase"
  rm -f "$results/suite-status" "$results"/hosting.tap "$results"/hosting.stderr
  # The failing boot's host never gets ready: there is nothing for the host side to do.
  host_pid=
  if [ "$phase" != failing ]; then
    node "$VM_DIR/hosting-host.mjs" "$phase" "http://127.0.0.1:$API_PORT" "$API_TOKEN" "$results" \
      >"$results/host-$phase.tap" 2>"$results/host-$phase.stderr" &
    host_pid=$!
  fi
  vm_log "phase $phase: booting (TCG, no KVM; timeout ${BOOT_TIMEOUT_SECONDS}s; serial log $RUN_DIR/serial-$phase.log)"
  local started=$SECONDS booted
  vm_boot "$BOOT_TIMEOUT_SECONDS"
  booted=$?
  cp "$RUN_DIR/serial.log" "$RUN_DIR/serial-$phase.log"
  vm_log "phase $phase: the guest ran $((SECONDS - started))s"
  # The guest is gone: the host side has nothing more to wait for.
  touch "$results/guest-gone-$phase"
  [ -z "$host_pid" ] || wait "$host_pid"
  [ -f "$results/hosting.tap" ] && mv "$results/hosting.tap" "$results/hosting-$phase.tap"
  [ -f "$results/hosting.stderr" ] && mv "$results/hosting.stderr" "$results/hosting-$phase.stderr"
  [ -f "$results/journal.txt" ] && mv "$results/journal.txt" "$results/journal-$phase.txt"
  if [ "$booted" -eq 124 ] || [ "$(cat "$results/suite-status" 2>/dev/null)" != done ]; then
    printf 'not ok 1 - phase %s: the guest suite did not finish (serial log: %s)\n1..1\n' \
      "$phase" "$RUN_DIR/serial-$phase.log" >"$results/boot-$phase.tap"
    return 1
  fi
  grep -q 'Kernel panic' "$RUN_DIR/serial.log" && return 2
  return 0
}

main() {
  vm_require_root "$VM_TIER"
  vm_find_deb
  vm_start_run
  vm_log "image $IMAGE, deb $DEB"
  API_TOKEN=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
  API_PORT=$(free_port)
  VM_QEMU_NET=(-netdev "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:$API_PORT-$GUEST_ADDRESS:$GUEST_API_PORT"
    -device virtio-net-pci,netdev=net0)
  install_guest_setup "$RUN_DIR/root"
  VM_QEMU_EXTRA=(-drive "file=$RUN_DIR/data.img,format=raw,if=virtio")
  local phase rc
  for phase in "${PHASES[@]}"; do
    boot_phase "$phase"
    rc=$?
    if [ "$rc" -eq 2 ]; then
      vm_print_kernel_panic
      echo "not ok - phase $phase: the guest kernel panicked (serial log: $RUN_DIR/serial-$phase.log)" \
        >"$RUN_DIR/results/panic-$phase.tap"
    fi
    # A later phase changes what an earlier one set up: without it, it tests nothing.
    [ "$rc" -eq 0 ] || break
  done
  echo done >"$RUN_DIR/results/suite-status"
  vm_release_run_dir
  vm_report_results
  if [ $? -eq 0 ]; then
    echo "$VM_TIER: all guest and host tests passed"
    exit 0
  fi
  echo "$VM_TIER: FAILED (serial logs and journals: $RUN_DIR)"
  exit 1
}

main "$@"
