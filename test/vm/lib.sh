# Functions shared by the VM tier's runners (sourced; see docs/vm-tier.md). A runner builds the
# image, mounts a per-run overlay of its rootfs, installs what it tests into the overlay, boots,
# and reads TAP from the results share. The cached image itself is never written.

VM_DIR=${VM_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
REPO_DIR=$(cd "$VM_DIR/../.." && pwd)
CACHE_DIR=${TURNHOST_VM_CACHE:-$VM_DIR/.cache}
# Each runner has its own run directory and lock under CACHE_DIR (run.sh: "run", run-deb.sh:
# "run-deb"), so different runners can boot at the same time from the one cached image.
VM_RUN_NAME=${VM_RUN_NAME:-run}
GUEST_DIR=$VM_DIR/guest
BOOT_TIMEOUT_SECONDS=${TURNHOST_VM_TIMEOUT:-1500}
EXIT_SKIPPED=77

vm_log() { printf '[vm %4ds] %s\n' "$SECONDS" "$*" >&2; }

# $1: the runner's name in its messages (vm-test, vm-deb-test).
vm_require_root() {
  [ "$(id -u)" -eq 0 ] || { echo "$1: must run as root" >&2; exit 1; }
}

# The runner's name in its messages and in the SKIPPED line (run.sh: vm-test, run-deb.sh:
# vm-deb-test).
VM_TIER=${VM_TIER:-vm-test}

# True when a tier that cannot run must fail: TURNHOST_VM_REQUIRED=1, or on a CI machine (CI set
# to anything but empty, 0 or false) unless TURNHOST_VM_REQUIRED=0 says otherwise. A CI run that
# skipped a tier would be green without having tested what the tier tests.
vm_required() {
  case "${TURNHOST_VM_REQUIRED:-}" in
    1) return 0 ;;
    0) return 1 ;;
  esac
  case "${CI:-}" in
    '' | 0 | false) return 1 ;;
  esac
  return 0
}

# The tier cannot run because a download failed (the mirror's fault, not the code's). Outside CI:
# `SKIPPED: <tier>: <reason>` and exit 0; .ci/summarize.mjs counts the line as a skipped tier.
# Where the tier is required (vm_required): a failing TAP result counted like any other, exit 1.
vm_skip() {
  if vm_required; then
    echo "not ok 1 - $VM_TIER could not run: $*"
    echo "# { total: 1, pass: 0, fail: 1 }"
    echo "$VM_TIER: FAILED: $* (a tier that cannot run fails under CI or TURNHOST_VM_REQUIRED=1; elsewhere it is SKIPPED)"
    exit 1
  fi
  echo "SKIPPED: $VM_TIER: $*"
  exit 0
}

# Takes the run directory's lock, the image (or skips) and a fresh overlay, released when the
# runner exits.
vm_start_run() {
  vm_lock_run_dir
  vm_require_image
  vm_prepare_run_dir
  trap vm_release_run_dir EXIT
}

# Holds CACHE_DIR/<VM_RUN_NAME>.lock (fd 9) until the runner exits: one run per run directory.
vm_lock_run_dir() {
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/$VM_RUN_NAME.lock"
  flock -n 9 || { echo "vm: another VM run holds $CACHE_DIR/$VM_RUN_NAME.lock" >&2; exit 1; }
}

# Sets IMAGE to a ready image directory; on a download failure skips the run (vm_skip).
vm_require_image() {
  local output rc
  output=$(bash "$VM_DIR/build-image.sh")
  rc=$?
  [ "$rc" -eq "$EXIT_SKIPPED" ] && vm_skip "$(echo "$output" | sed -n 's/^SKIPPED: //p')"
  if [ "$rc" -ne 0 ]; then
    vm_log "building the guest image failed (exit $rc)"
    echo "not ok 1 - $VM_TIER could not build its guest image (build-image.sh exit $rc)"
    echo "# { total: 1, pass: 0, fail: 1 }"
    exit 1
  fi
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

# Sets DEB to the deb under test: TURNHOST_DEB, else the newest dist/turnhost_*.deb.
vm_find_deb() {
  local deb=${TURNHOST_DEB:-}
  [ -n "$deb" ] || deb=$(ls -t "$REPO_DIR"/dist/turnhost_*_amd64.deb 2>/dev/null | head -n 1)
  if [ -z "$deb" ] || [ ! -f "$deb" ]; then
    echo "$VM_TIER: no deb: run 'make deb' first (make $VM_TIER does) or set TURNHOST_DEB" >&2
    exit 1
  fi
  DEB=$(readlink -f "$deb")
}

# The guest has no network to Debian's mirror, and the image lacks some of the deb's
# dependencies (nodejs and its libraries). Copies the deb to $2 in the overlay at $1; the
# image's own apt (trixie sources) resolves its dependencies from the deb's own Depends and
# installs them into the overlay at the host's speed (unpacking them over 9p under TCG takes a
# guest minutes), so the guest has exactly what the package pulls in. The cached image is never
# written.
vm_install_deb_dependencies() {
  local root=$1 deb_dir=$2 log=$RUN_DIR/apt-dependencies.log
  install -D -m 0644 "$DEB" "$root$deb_dir/$(basename "$DEB")"
  vm_log "installing the deb's dependencies into the overlay with the guest's apt (trixie)"
  # update first: the image's lists age, and the mirror drops superseded versions.
  if ! chroot "$root" sh -c "apt-get update -q && apt-get install -y -q --download-only --no-install-recommends $deb_dir/$(basename "$DEB")" >"$log" 2>&1; then
    tail -5 "$log" >&2
    grep -qiE "failed to fetch|temporary failure resolving|could not resolve|unable to connect|network is unreachable" "$log" &&
      vm_skip "apt-get could not download the deb's dependencies (log: $log)"
    echo "$VM_TIER: resolving the deb's dependencies failed (log: $log)" >&2
    exit 1
  fi
  if ! chroot "$root" sh -c 'DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /var/cache/apt/archives/*.deb' >>"$log" 2>&1; then
    tail -5 "$log" >&2
    echo "$VM_TIER: installing the deb's dependencies into the overlay failed (log: $log)" >&2
    exit 1
  fi
  vm_log "dependencies: $(cd "$root/var/cache/apt/archives" && ls ./*.deb | sed 's|^\./||; s/_.*//' | tr '\n' ' ')"
  rm -f "$root"/var/cache/apt/archives/*.deb
}

# Enables guest unit $2 (a file in GUEST_DIR) for multi-user.target in the overlay at $1.
vm_enable_guest_unit() {
  local root=$1 unit=$2
  install -o 0 -g 0 -m 0644 "$GUEST_DIR/$unit" "$root/etc/systemd/system/$unit"
  mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
  ln -sf "/etc/systemd/system/$unit" "$root/etc/systemd/system/multi-user.target.wants/$unit"
}

# What every overlay (at $1) needs to run the guest suite: the host's node for the test files,
# the suite unit, mounts for the two shares vm_boot exports, and the data dir on a tmpfs with
# options $2. The tmpfs because SQLite's WAL needs shared writable mmap, which 9p does not give;
# without $2 the runner mounts a data dir of its own (run-hosting.sh: a disk).
vm_install_suite_setup() {
  local root=$1 data_dir_options=${2:-}
  install -m 0755 "$(readlink -f "$(command -v node)")" "$root/usr/local/bin/node"
  vm_enable_guest_unit "$root" turnhost-vmtest-suite.service
  mkdir -p "$root/turnhost" "$root/vmresults" "$root/var/lib/turnhost"
  cat >>"$root/etc/fstab" <<EOF
turnhost /turnhost 9p trans=virtio,version=9p2000.L,msize=524288,ro,cache=loose 0 0
vmresults /vmresults 9p trans=virtio,version=9p2000.L,msize=524288,rw 0 0
EOF
  [ -z "$data_dir_options" ] || echo "tmpfs /var/lib/turnhost tmpfs $data_dir_options 0 0" >>"$root/etc/fstab"
}

# Devices a runner adds to the guest (qemu arguments): VM_QEMU_NET replaces the default
# `-nic none`, VM_QEMU_EXTRA is appended (a disk, say).
VM_QEMU_NET=()
VM_QEMU_EXTRA=()

# Boots the overlay with the checkout read-only at guest tag "turnhost" and RUN_DIR/results
# writable at tag "vmresults"; waits for the guest to power off or for $1 seconds. Prints
# progress from the serial log (RUN_DIR/serial.log). Returns 0 when the guest powered off,
# 124 on timeout.
vm_boot() {
  local timeout=$1 serial=$RUN_DIR/serial.log shown=0 lines net=(-nic none)
  [ "${#VM_QEMU_NET[@]}" -eq 0 ] || net=("${VM_QEMU_NET[@]}")
  : >"$serial"
  qemu-system-x86_64 \
    -nodefaults -machine q35 -accel "tcg,thread=${TURNHOST_VM_TCG_THREAD:-single}" -cpu "${TURNHOST_VM_CPU_MODEL:-max}" -smp "${TURNHOST_VM_CPUS:-2}" -m "${TURNHOST_VM_MEMORY_MB:-2048}" \
    -nographic -monitor none -serial "file:$serial" "${net[@]}" -no-reboot \
    -kernel "$IMAGE/vmlinuz" -initrd "$IMAGE/initrd.img" \
    -append "console=ttyS0 panic=-1 loglevel=4 systemd.show_status=1 systemd.log_color=0" \
    -fsdev "local,id=rootfs,path=$RUN_DIR/root,security_model=passthrough" \
    -device virtio-9p-pci,fsdev=rootfs,mount_tag=rootfs \
    -fsdev "local,id=turnhost,path=$REPO_DIR,security_model=none,readonly=on" \
    -device virtio-9p-pci,fsdev=turnhost,mount_tag=turnhost \
    -fsdev "local,id=vmresults,path=$RUN_DIR/results,security_model=none" \
    -device virtio-9p-pci,fsdev=vmresults,mount_tag=vmresults \
    "${VM_QEMU_EXTRA[@]}" \
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

# True when the guest kernel panicked before it ran anything of ours: the serial log has a panic
# and not the initramfs's first line. Nothing in the overlay was touched then, so a second boot
# tests the same thing. Under TCG this has been seen once in CI ("Fatal exception in interrupt"
# at 1.3 s of uptime) and never reproduced in 20 boots.
vm_kernel_panicked_before_userspace() {
  local serial=$RUN_DIR/serial.log
  [ -z "$(ls "$RUN_DIR/results" 2>/dev/null)" ] &&
    grep -q 'Kernel panic' "$serial" &&
    ! grep -q 'turnhost-vm-initramfs:' "$serial"
}

# Prints the kernel's own account of the panic (oops, registers, call trace), so the CI log has it.
vm_print_kernel_panic() {
  tr -d '\r' <"$RUN_DIR/serial.log" |
    sed -n '/BUG:\|Oops\|general protection\|invalid opcode\|Kernel panic\|RIP:/,$p' | head -n 60 |
    sed -e 's/^/  guest panic: /' >&2
}

# Boots the prepared overlay, prints the results and exits: 0 when every guest test passed, 1
# otherwise. $1: the runner's name in its messages; $2: the function that prepares an overlay
# (given its root), to prepare a fresh one. A guest kernel panic gets one more run, announced
# with the panic's oops: before userspace the overlay is untouched and boots again; mid-suite
# the partial results are shown, then dropped, and the whole suite runs on a fresh overlay. A
# second panic fails the run. Under TCG, CI has seen three different panics in three places
# (docs/vm-tier.md), none of them reproduced on demand.
vm_boot_and_report() {
  local runner=$1 prepare=$2 boot_started booted failures attempt kept
  for attempt in 1 2; do
    vm_log "booting (TCG, no KVM; timeout ${BOOT_TIMEOUT_SECONDS}s; serial log $RUN_DIR/serial.log)"
    boot_started=$SECONDS
    vm_boot "$BOOT_TIMEOUT_SECONDS"
    booted=$?
    vm_log "guest ran $((SECONDS - boot_started))s"
    [ "$booted" -eq 0 ] && grep -q 'Kernel panic' "$RUN_DIR/serial.log" || break
    vm_print_kernel_panic
    [ "$attempt" -eq 2 ] && break
    if vm_kernel_panicked_before_userspace; then
      cp "$RUN_DIR/serial.log" "$RUN_DIR/serial.panic-$attempt.log"
      vm_log "the guest kernel panicked before userspace (kept as serial.panic-$attempt.log); booting once more"
      continue
    fi
    kept=$CACHE_DIR/$VM_RUN_NAME.serial.panic-$attempt.log
    cp "$RUN_DIR/serial.log" "$kept"
    cat "$RUN_DIR"/results/*.tap 2>/dev/null | sed -e 's/^/  before the panic: /' >&2
    vm_log "the guest kernel panicked mid-suite (serial log kept as $kept); the results above are dropped and the whole suite runs once more on a fresh overlay"
    vm_prepare_run_dir
    "$prepare" "$RUN_DIR/root"
  done
  vm_release_run_dir
  vm_report_results
  failures=$?
  if [ "$booted" -eq 124 ]; then
    echo "$runner: FAILED: the guest did not power off within ${BOOT_TIMEOUT_SECONDS}s (serial log: $RUN_DIR/serial.log)"
    exit 1
  fi
  [ "$failures" -eq 0 ] && { echo "$runner: all guest tests passed"; exit 0; }
  echo "$runner: FAILED (serial log: $RUN_DIR/serial.log, guest journal: $RUN_DIR/results/journal.txt)"
  exit 1
}
