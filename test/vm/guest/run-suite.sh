#!/bin/sh
# Guest side (turnhost-vmtest-suite.service): runs each test/vm/guest/*.test.mjs in name order,
# TAP to the console (the host shows it live) and to /vmresults/<name>.tap, then saves the
# journal for debugging. The unit powers the guest off when this returns.
set -u
results=/vmresults
echo "turnhost-vm: suite starting at uptime $(cut -d' ' -f1 /proc/uptime)s"
for test in /turnhost/test/vm/guest/*.test.mjs; do
  name=$(basename "$test" .test.mjs)
  echo "turnhost-vm: running $name"
  /usr/local/bin/node "$test" 2>"$results/$name.stderr" | tee "$results/$name.tap"
done
echo "turnhost-vm: suite finished at uptime $(cut -d' ' -f1 /proc/uptime)s"
journalctl -b --no-pager -o short-monotonic >"$results/journal.txt" 2>&1
echo done >"$results/suite-status"
