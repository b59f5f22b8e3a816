#!/bin/sh
# Guest side (turnhost-vmtest-suite.service): runs test/vm/guest/*.test.mjs in name order, or
# only the files named as arguments, TAP to the console (the host shows it live) and to
# /vmresults/<name>.tap, then saves the journal for debugging. The unit powers the guest off
# when this returns. deb.test.mjs and hosting.test.mjs run only when named (run-deb.sh and
# run-hosting.sh do): they install the package, which the supervisor run.sh sets up from the
# checkout must not meet.
set -u
results=/vmresults
guest=/turnhost/test/vm/guest
if [ "$#" -eq 0 ]; then
  set -- $(cd "$guest" && ls ./*.test.mjs | sed 's|^\./||' | grep -vxE '(deb|hosting)\.test\.mjs')
fi
echo "turnhost-vm: suite starting at uptime $(cut -d' ' -f1 /proc/uptime)s"
for file in "$@"; do
  name=$(basename "$file" .test.mjs)
  echo "turnhost-vm: running $name"
  /usr/local/bin/node "$guest/$file" 2>"$results/$name.stderr" | tee "$results/$name.tap"
done
echo "turnhost-vm: suite finished at uptime $(cut -d' ' -f1 /proc/uptime)s"
journalctl -b --no-pager -o short-monotonic >"$results/journal.txt" 2>&1
echo done >"$results/suite-status"
