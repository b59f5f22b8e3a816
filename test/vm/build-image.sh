#!/usr/bin/env bash
# Builds, or reuses from test/vm/.cache/, the VM tier's guest image (docs/vm-tier.md):
#   rootfs/      Debian trixie minbase + systemd, debootstrapped into a directory (served over 9p)
#   vmlinuz      the Debian kernel; its modules live in rootfs/usr/lib/modules
#   initrd.img   busybox initramfs that mounts the 9p root and switch_roots to systemd
# The image holds nothing from this checkout (no node, no users, no turnhost files): run.sh adds
# those per run in an overlay, so one image serves every run, and the packaging tier can reuse it.
#
# Prints the image directory on its last stdout line. Exit codes: 0 ready, 77 skipped because
# a download failed (printed as "SKIPPED: <reason>"), anything else a real failure.
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_DIR=${TURNHOST_VM_CACHE:-$VM_DIR/.cache}
MIRROR=${TURNHOST_VM_MIRROR:-http://deb.debian.org/debian}
SUITE=trixie
GUEST_PACKAGES=systemd,systemd-sysv,udev,kmod,iproute2,procps,dbus,passwd,adduser,util-linux
# Modules the initramfs loads (their dependencies are added from modules.dep).
INITRAMFS_MODULES=(9p 9pnet_virtio)
HOST_PACKAGES=(qemu-system-x86 debootstrap busybox-static)
EXIT_SKIPPED=77

started=$SECONDS
progress() { printf '[vm-image %4ds] %s\n' "$((SECONDS - started))" "$*" >&2; }
skip() {
  echo "SKIPPED: $*"
  exit "$EXIT_SKIPPED"
}
die() {
  echo "vm-image: $*" >&2
  exit 1
}

# The cache key: the recipe version (bump it when this script changes what it builds), the
# suite, mirror, package list and the initramfs init. A new key builds a new image; older images
# are removed once the new one is complete.
IMAGE_RECIPE_VERSION=2
image_stamp() {
  { echo "$IMAGE_RECIPE_VERSION $SUITE $MIRROR $GUEST_PACKAGES ${INITRAMFS_MODULES[*]}"; cat "$VM_DIR/initramfs-init.sh"; } |
    sha256sum | cut -c1-16
}

ensure_host_packages() {
  local missing=() pkg
  for pkg in "${HOST_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  progress "installing host packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$CACHE_DIR/host-packages.log" 2>&1; then
    tail -5 "$CACHE_DIR/host-packages.log" >&2
    skip "apt-get could not install ${missing[*]} (see $CACHE_DIR/host-packages.log)"
  fi
}

# Runs a long command with its output in a log, printing its latest line every 15 s.
run_logged() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  local pid=$! ticks=0 last
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    ticks=$((ticks + 1))
    if [ $((ticks % 15)) -eq 0 ]; then
      last=$(tail -n 1 "$log" 2>/dev/null | cut -c1-100)
      [ -n "$last" ] && progress "  ... $last"
    fi
  done
  wait "$pid"
}

is_download_failure() {
  grep -qiE "couldn't download|failed getting release|failed to fetch|temporary failure resolving|could not resolve|connection (refused|timed out)|unable to connect|network is unreachable|retrying failed download|download failed" "$1"
}

debootstrap_rootfs() {
  local work=$1
  progress "debootstrap $SUITE (minbase + systemd) from $MIRROR; takes 1-2 minutes"
  if ! run_logged "$work/debootstrap.log" debootstrap --variant=minbase --include="$GUEST_PACKAGES" \
    "$SUITE" "$work/rootfs" "$MIRROR"; then
    tail -5 "$work/debootstrap.log" >&2
    is_download_failure "$work/debootstrap.log" && skip "debootstrap could not download $SUITE from $MIRROR"
    die "debootstrap failed (log: $work/debootstrap.log)"
  fi
}

# Downloads the kernel package inside the guest rootfs (its apt knows the guest suite) and
# extracts it beside the rootfs: extracting into a merged-usr rootfs would replace its lib symlink.
install_kernel() {
  local work=$1 rootfs=$1/rootfs package deb version
  package=$(chroot "$rootfs" apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')
  [ -n "$package" ] || die "cannot find the kernel package behind linux-image-amd64"
  progress "downloading $package"
  mkdir -p "$rootfs/tmp/kernel-download"
  chmod 777 "$rootfs/tmp/kernel-download"
  if ! chroot "$rootfs" sh -c "cd /tmp/kernel-download && apt-get download -q $package" >"$work/kernel-download.log" 2>&1; then
    tail -5 "$work/kernel-download.log" >&2
    is_download_failure "$work/kernel-download.log" && skip "apt-get could not download $package"
    die "downloading $package failed (log: $work/kernel-download.log)"
  fi
  deb=$(ls "$rootfs"/tmp/kernel-download/*.deb)
  dpkg-deb -x "$deb" "$work/kernel"
  rm -rf "$rootfs/tmp/kernel-download"
  version=$(ls "$work/kernel/usr/lib/modules")
  [ -f "$work/kernel/boot/vmlinuz-$version" ] || die "kernel package has no boot/vmlinuz-$version"
  cp "$work/kernel/boot/vmlinuz-$version" "$work/vmlinuz"
  mkdir -p "$rootfs/usr/lib/modules"
  cp -a "$work/kernel/usr/lib/modules/$version" "$rootfs/usr/lib/modules/"
  chroot "$rootfs" depmod "$version"
  echo "$version" >"$work/kernel-version"
  progress "kernel $version installed"
}

# Lists a module and its dependencies, dependencies first, as paths relative to the module dir.
module_closure() {
  local dep_file=$1 name=$2 line path deps dep
  line=$(grep -E "(^|/)$name\.ko(\.xz|\.zst|\.gz)?:" "$dep_file" | head -n 1)
  [ -n "$line" ] || die "module $name is not in $dep_file"
  path=${line%%:*}
  deps=${line#*:}
  for dep in $deps; do
    module_closure "$dep_file" "$(basename "$dep" | sed -E 's/\.ko(\.xz|\.zst|\.gz)?$//')"
  done
  echo "$path"
}

build_initramfs() {
  local work=$1 version modules_dir root=$1/initramfs module name seen=" "
  version=$(cat "$work/kernel-version")
  modules_dir=$work/rootfs/usr/lib/modules/$version
  mkdir -p "$root"/{bin,dev,proc,sys,newroot,modules}
  cp /bin/busybox "$root/bin/busybox"
  ldd /bin/busybox >/dev/null 2>&1 && die "/bin/busybox is dynamically linked; install busybox-static"
  cp "$VM_DIR/initramfs-init.sh" "$root/init"
  chmod 755 "$root/init"
  : >"$root/modules/order"
  for name in "${INITRAMFS_MODULES[@]}"; do
    for module in $(module_closure "$modules_dir/modules.dep" "$name"); do
      case "$seen" in *" $module "*) continue ;; esac
      seen="$seen$module "
      local target
      target=$(basename "$module" | sed -E 's/\.ko(\.xz|\.zst|\.gz)?$/.ko/')
      case "$module" in
        *.xz) xz -dc "$modules_dir/$module" >"$root/modules/$target" ;;
        *.zst) zstd -dc "$modules_dir/$module" >"$root/modules/$target" ;;
        *) cp "$modules_dir/$module" "$root/modules/$target" ;;
      esac
      echo "$target" >>"$root/modules/order"
    done
  done
  progress "initramfs modules: $(tr '\n' ' ' <"$root/modules/order")"
  (cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.img")
}

# Guest settings every tier wants. Under TCG each service costs seconds, so the guest runs only
# what a supervisor host needs: no udev (the devices are fixed), no dbus/logind (systemctl uses
# systemd's private socket as root), no first-boot caches (ldconfig, catalog), no timers or
# gettys; the journal stays in memory (run.sh's suite saves it to the results share).
MASKED_UNITS=(
  apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer fstrim.timer e2scrub_all.timer
  getty@tty1.service serial-getty@ttyS0.service systemd-pstore.service
  systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket
  systemd-udev-trigger.service systemd-udev-settle.service systemd-hwdb-update.service
  dbus.service dbus.socket systemd-logind.service systemd-user-sessions.service
  ldconfig.service systemd-journal-catalog-update.service systemd-update-done.service
  systemd-journal-flush.service
)
tune_guest() {
  local rootfs=$1/rootfs unit
  for unit in "${MASKED_UNITS[@]}"; do
    ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
  done
  mkdir -p "$rootfs/etc/systemd/journald.conf.d"
  printf '[Journal]\nStorage=volatile\n' >"$rootfs/etc/systemd/journald.conf.d/vm-tier.conf"
  chroot "$rootfs" ldconfig
  echo turnhost-vm >"$rootfs/etc/hostname"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb
}

main() {
  [ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot, qemu's 9p passthrough)"
  mkdir -p "$CACHE_DIR"
  # Runners may start at the same time (run.sh, run-deb.sh): one builds, the others wait for it.
  exec 8>"$CACHE_DIR/image.lock"
  flock 8
  local stamp image work
  stamp=$(image_stamp)
  image=$CACHE_DIR/image-$stamp
  if [ -f "$image/complete" ]; then
    progress "reusing cached image $image"
    echo "$image"
    return 0
  fi
  ensure_host_packages
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 missing after installing qemu-system-x86"
  work=$image.partial
  rm -rf "$work"
  mkdir -p "$work"
  progress "building image $stamp in $work"
  debootstrap_rootfs "$work"
  install_kernel "$work"
  build_initramfs "$work"
  tune_guest "$work"
  rm -rf "$work/kernel" "$work/initramfs"
  date -u +%FT%TZ >"$work/complete"
  for old in "$CACHE_DIR"/image-*; do
    [ "$old" = "$work" ] || rm -rf "$old"
  done
  mv "$work" "$image"
  progress "image ready: $image"
  echo "$image"
}

main "$@"
