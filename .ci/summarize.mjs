// Reads tap's run log and prints the one line CI reads: `N passed, N failed`.
// A non-zero exit with no failing test counted (a build or runner failure) counts as one failure.
import { readFileSync } from 'node:fs';

const [logPath, exitStatus] = process.argv.slice(2);
const text = readFileSync(logPath, 'utf8');
let passed = 0;
let failed = 0;
for (const match of text.matchAll(/^# \{ (.*) \}$/gm)) {
  const fields = Object.fromEntries(
    match[1].split(',').map((part) =>
      part
        .trim()
        .split(':')
        .map((s) => s.trim()),
    ),
  );
  passed += Number(fields.pass ?? 0);
  failed += Number(fields.fail ?? 0);
}
if (Number(exitStatus) !== 0 && failed === 0) failed = 1;
console.log(`${passed} passed, ${failed} failed`);
