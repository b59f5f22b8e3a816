// Reads CI's run log and prints the one line CI reads: `N passed, N failed, N skipped`, after
// one line per tier (its time and counts).
//   node .ci/summarize.mjs LOG EXIT_STATUS
//
// Counted: every `# { total, pass, fail, skip }` line (tap's summary; the VM runners print the
// same), and every `SKIPPED: TIER: REASON` line (a VM tier that did not run, test/vm/lib.sh) as
// one skipped. .ci/run frames each tier with `ci: tier NAME started` and `ci: tier NAME took N s
// (exit S)`; a tier that exited non-zero without a failing test counted (a build or runner
// failure) counts as one failure, and so does a non-zero EXIT_STATUS when nothing else failed.
import { readFileSync } from 'node:fs';

const TIER_START = /^ci: tier (\S+) started$/;
const TIER_END = /^ci: tier (\S+) took (\d+) s \(exit (\d+)\)$/;
const TAP_SUMMARY = /^# \{ (.*) \}$/;
const TIER_SKIPPED = /^SKIPPED: (\S+): (.*)$/;

function newTier(name) {
  return { name, seconds: undefined, exit: undefined, pass: 0, fail: 0, skip: 0, skipped: [] };
}

function tapFields(inner) {
  return Object.fromEntries(
    inner.split(',').map((part) =>
      part
        .trim()
        .split(':')
        .map((s) => s.trim()),
    ),
  );
}

/** Splits the log into tiers; lines outside any frame belong to an unnamed tier. */
function readTiers(text) {
  const tiers = [];
  let current = newTier(undefined);
  tiers.push(current);
  for (const line of text.split('\n')) {
    let match;
    if ((match = TIER_START.exec(line))) {
      current = newTier(match[1]);
      tiers.push(current);
    } else if ((match = TIER_END.exec(line)) && match[1] === current.name) {
      current.seconds = Number(match[2]);
      current.exit = Number(match[3]);
      current = newTier(undefined);
      tiers.push(current);
    } else if ((match = TAP_SUMMARY.exec(line))) {
      const fields = tapFields(match[1]);
      current.pass += Number(fields.pass ?? 0);
      current.fail += Number(fields.fail ?? 0);
      current.skip += Number(fields.skip ?? 0);
    } else if ((match = TIER_SKIPPED.exec(line))) {
      current.skipped.push(`${match[1]}: ${match[2]}`);
      current.skip += 1;
    }
  }
  for (const tier of tiers) {
    if (tier.exit !== undefined && tier.exit !== 0 && tier.fail === 0) {
      tier.fail = 1;
      tier.note = `exited ${tier.exit} without a failing test counted`;
    }
  }
  return tiers;
}

function describe(tier) {
  const time = tier.seconds === undefined ? '' : ` ${tier.seconds} s,`;
  const note = tier.note === undefined ? '' : ` (${tier.note})`;
  return `ci: tier ${tier.name}:${time} ${tier.pass} passed, ${tier.fail} failed, ${tier.skip} skipped${note}`;
}

const [logPath, exitStatus] = process.argv.slice(2);
const tiers = readTiers(readFileSync(logPath, 'utf8'));
let passed = 0;
let failed = 0;
let skipped = 0;
for (const tier of tiers) {
  passed += tier.pass;
  failed += tier.fail;
  skipped += tier.skip;
  if (tier.name !== undefined) console.log(describe(tier));
  for (const reason of tier.skipped) console.log(`ci: SKIPPED ${reason}`);
}
if (Number(exitStatus) !== 0 && failed === 0) failed = 1;
console.log(`${passed} passed, ${failed} failed, ${skipped} skipped`);
