// A minimal TAP producer for the guest (no dependencies: the guest runs these files straight
// from the read-only checkout). Each check is one test point; a thrown error fails it with a
// YAML diagnostic. The process exits 1 when a check failed.
let count = 0;
let failures = 0;

function yamlBlock(fields) {
  const lines = ['  ---'];
  for (const [key, value] of Object.entries(fields)) {
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    lines.push(`  ${key}: |`);
    for (const line of String(text).split('\n').slice(0, 40)) lines.push(`    ${line}`);
  }
  lines.push('  ...');
  return lines.join('\n');
}

export class CheckFailed extends Error {
  constructor(message, details = {}) {
    super(message);
    this.details = details;
  }
}

/** Fails the current check when `condition` is false; `details` go into the diagnostic. */
export function expect(condition, message, details = {}) {
  if (!condition) throw new CheckFailed(message, details);
}

export async function check(name, body) {
  count += 1;
  try {
    await body();
    console.log(`ok ${count} - ${name}`);
  } catch (error) {
    failures += 1;
    console.log(`not ok ${count} - ${name}`);
    const details = error instanceof CheckFailed ? error.details : { stack: error?.stack ?? String(error) };
    console.log(yamlBlock({ message: error?.message ?? String(error), ...details }));
  }
}

export function comment(text) {
  for (const line of String(text).split('\n')) console.log(`# ${line}`);
}

export function finish() {
  console.log(`1..${count}`);
  process.exitCode = failures > 0 ? 1 : 0;
}
