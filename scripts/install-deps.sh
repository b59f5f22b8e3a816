#!/usr/bin/env bash
# Installs the system packages turnhost needs on a fresh Debian/Ubuntu machine (as root).
# Idempotent. One argument picks the set:
#   runtime  what building and running the server needs (`make run`, `make build`)
#   test     the runtime set plus the test toolchain (`make test`, CI; the default)
#
# Packages go in with --no-install-recommends, so every tool or runtime the build and the tests
# run must be named here (or be a Depends of a package named here): a recommendation is skipped,
# and a machine where it was installed by hand hides the gap. To check the lists, run the tests
# (or `make run` and a few turns, for the runtime set) under process accounting (`accton`), then
# `dpkg -S` the binary of each command `lastcomm` shows. The runtime set must stay small: a new
# user's `make run` installs it, so a tool only the tests or benchmarks run goes in TEST_PACKAGES.
set -euo pipefail

RUNTIME_PACKAGES=(
  build-essential   # gcc, make and static libc for the helper and the worker; g++ for node-gyp (better-sqlite3)
  python3           # node-gyp (better-sqlite3 when no prebuilt binary downloads)
  util-linux        # unshare: the supervisor's namespace probe (supervisor/probes/facilities.ts)
  git               # the software identity (commit) in status
)

TEST_PACKAGES=(
  iproute2          # ip: network namespace tests
  passwd            # useradd/userdel for the helper's caller tests
  bubblewrap        # bench/launch baseline
  clang             # libFuzzer target for the helper's descriptor parser
  clang-format      # make lint: the helper's C style (.clang-format)
  libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes clang links it with (only a recommendation of clang)
  llvm-14           # llvm-symbolizer: readable sanitizer reports (only a recommendation of clang)
  curl              # the worker egress tests' client inside a turn
  adduser           # the deb's maintainer scripts, run by the packaging tests
  lintian           # packaging tests: the deb must be lintian-clean
  systemd           # systemd-analyze verify/security on the unit (offline)
  man-db            # packaging tests render the man page
  qemu-system-x86   # the VM tier (make vm-test): real systemd and cgroup v2
  debootstrap       # the VM tier's guest root filesystem
  busybox-static    # the VM tier's initramfs
  xz-utils          # the VM tier: unpacking the guest kernel's modules (.ko.xz)
  zstd              # the VM tier: the same for kernels whose modules are .ko.zst
  chromium          # the status page's browser test (driven by playwright-core; never a downloaded browser)
  cloud-init        # the hosting template's schema check (cloud-init schema --config-file)
)

case "${1:-test}" in
  runtime) APT_PACKAGES=("${RUNTIME_PACKAGES[@]}") ;;
  test) APT_PACKAGES=("${RUNTIME_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *)
    echo "usage: $0 [runtime|test]" >&2
    exit 2
    ;;
esac

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps (${1:-test}): apt-get install ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "install-deps: Node.js >= 20 is required (found ${node_major}); install nodejs 20 first" >&2
  exit 1
fi
