# Functions shared by the VM tier's runners (sourced; see docs/vm-tier.md). A runner builds the
# image, mounts a per-run overlay of its rootfs, installs what it tests into the overlay, boots,
# and reads TAP from the results share. The cached image itself is never written.

VM_DIR=${VM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
REPO_DIR=$(cd "$VM_DIR/../.." && pwd)
CACHE_DIR=${TURNHOST_VM_CACHE:-$VM_DIR/.cache}
# Each runner has its own run directory and lock under CACHE_DIR (run.sh: "run", run-deb.sh:
# "run-deb"), so different runners can boot at the same time from the one cached image.
VM_RUN_NAME=${VM_RUN_NAME:-run}
EXIT_SKIPPED=77

vm_log() { printf '[vm %4ds] %s\n' "$SECONDS" "$*" >&2; }

# Holds CACHE_DIR/<VM_RUN_NAME>.lock (fd 9) until the runner exits: one run per run directory.
vm_lock_run_dir() {
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/$VM_RUN_NAME.lock"
  flock -n 9 || { echo "vm: another VM run holds $CACHE_DIR/$VM_RUN_NAME.lock" >&2; exit 1; }
}

# Sets IMAGE to a ready image directory; on a download failure prints SKIPPED and exits
# (0, or 1 when TURNHOST_VM_REQUIRED=1 says a skip must fail).
vm_require_image() {
  local output rc
  output=$(bash "$VM_DIR/build-image.sh")
  rc=$?
  if [ "$rc" -eq "$EXIT_SKIPPED" ]; then
    echo "$output" | grep '^SKIPPED:'
    [ "${TURNHOST_VM_REQUIRED:-0}" = 1 ] && exit 1
    exit 0
  fi
  [ "$rc" -eq 0 ] || { vm_log "building the guest image failed (exit $rc)"; exit 1; }
  IMAGE=$(echo "$output" | tail -n 1)
}

# Mounts a fresh overlay (cached rootfs below, RUN_DIR/upper above) at RUN_DIR/root, where
# RUN_DIR is CACHE_DIR/<VM_RUN_NAME>. The previous run's directory is removed first, so its
# serial log and journal stay until the next run.
vm_prepare_run_dir() {
  RUN_DIR=$CACHE_DIR/$VM_RUN_NAME
  vm_release_run_dir
  rm -rf "$RUN_DIR"
  mkdir -p "$RUN_DIR"/{upper,work,root,results}
  mount -t overlay overlay -o "lowerdir=$IMAGE/rootfs,upperdir=$RUN_DIR/upper,workdir=$RUN_DIR/work" "$RUN_DIR/root"
}

vm_release_run_dir() {
  if [ -n "${QEMU_PID:-}" ] && kill -0 "$QEMU_PID" 2>/dev/null; then
    kill "$QEMU_PID" 2>/dev/null
    wait "$QEMU_PID" 2>/dev/null
  fi
  QEMU_PID=
  if [ -n "${RUN_DIR:-}" ] && mountpoint -q "$RUN_DIR/root"; then umount "$RUN_DIR/root"; fi
}

# Boots the overlay with the checkout read-only at guest tag "turnhost" and RUN_DIR/results
# writable at tag "vmresults"; waits for the guest to power off or for $1 seconds. Prints
# progress from the serial log (RUN_DIR/serial.log). Returns 0 when the guest powered off,
# 124 on timeout.
vm_boot() {
  local timeout=$1 serial=$RUN_DIR/serial.log shown=0 lines
  : >"$serial"
  qemu-system-x86_64 \
    -nodefaults -machine q35,accel=tcg -cpu "${TURNHOST_VM_CPU_MODEL:-max}" -smp "${TURNHOST_VM_CPUS:-2}" -m "${TURNHOST_VM_MEMORY_MB:-2048}" \
    -nographic -monitor none -serial "file:$serial" -nic none -no-reboot \
    -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
    -append "console=ttyS0 panic=-1 loglevel=4 systemd.show_status=1 systemd.log_color=0" \
    -fsdev "local,id=rootfs,path=$RUN_DIR/root,security_model=passthrough" \
    -device virtio-9p-pci,fsdev=rootfs,mount_tag=rootfs \
    -fsdev "local,id=turnhost,path=$REPO_DIR,security_model=none,readonly=on" \
    -device virtio-9p-pci,fsdev=turnhost,mount_tag=turnhost \
    -fsdev "local,id=vmresults,path=$RUN_DIR/results,security_model=none" \
    -device virtio-9p-pci,fsdev=vmresults,mount_tag=vmresults \
    </dev/null >"$RUN_DIR/qemu.log" 2>&1 &
  QEMU_PID=$!
  local started=$SECONDS
  while kill -0 "$QEMU_PID" 2>/dev/null; do
    if [ $((SECONDS - started)) -ge "$timeout" ]; then
      vm_log "TIMEOUT: the guest did not finish within ${timeout}s; killing qemu (serial log: $serial)"
      kill "$QEMU_PID" 2>/dev/null
      wait "$QEMU_PID" 2>/dev/null
      QEMU_PID=
      return 124
    fi
    sleep 2
    # Progress: milestones and TAP lines as the guest prints them.
    lines=$(wc -l <"$serial")
    if [ "$lines" -gt "$shown" ]; then
      sed -n "$((shown + 1)),${lines}p" "$serial" | tr -d '\r' |
        sed -E 's/^\[ *[0-9.]+\] [A-Za-z0-9_.-]+\[[0-9]+\]: //' |
        grep -E '^(ok |not ok |turnhost-vm)|Reached target (basic|multi-user)|Started turnhost|Failed|Kernel panic' |
        sed -e 's/^/  guest: /' >&2
      shown=$lines
    fi
  done
  wait "$QEMU_PID"
  local rc=$?
  QEMU_PID=
  [ "$rc" -eq 0 ] || vm_log "qemu exited with $rc (see $RUN_DIR/qemu.log)"
  return 0
}

# Prints every TAP file and returns the number of failures (a file without its plan, or a
# missing suite status, counts as a failure).
vm_report_results() {
  local results=$RUN_DIR/results passed=0 failed=0 file planned ran
  if ! ls "$results"/*.tap >/dev/null 2>&1; then
    echo "not ok 1 - the guest produced no TAP results (serial log: $RUN_DIR/serial.log)"
    echo "# { total: 1, pass: 0, fail: 1 }"
    return 1
  fi
  for file in "$results"/*.tap; do
    echo "# vm test file: $(basename "$file" .tap)"
    cat "$file"
    passed=$((passed + $(grep -c '^ok ' "$file")))
    failed=$((failed + $(grep -c '^not ok ' "$file")))
    planned=$(sed -n 's/^1\.\.\([0-9]*\).*/\1/p' "$file" | tail -n 1)
    ran=$(grep -cE '^(not )?ok ' "$file")
    if [ -z "$planned" ] || [ "$planned" != "$ran" ]; then
      echo "not ok - $(basename "$file" .tap): plan ${planned:-missing}, ran $ran (stderr: $results/$(basename "$file" .tap).stderr)"
      failed=$((failed + 1))
    fi
  done
  if [ "$(cat "$results/suite-status" 2>/dev/null)" != done ]; then
    echo "not ok - the guest suite did not finish (serial log: $RUN_DIR/serial.log)"
    failed=$((failed + 1))
  fi
  echo "# { total: $((passed + failed)), pass: $passed, fail: $failed }"
  return "$((failed > 0 ? 1 : 0))"
}
