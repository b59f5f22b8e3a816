/**
 * docs/operator.md's troubleshooting table covers every requirement and reason string that
 * docs/probes.md lists (the probes' own table), so a new probe string cannot ship without an
 * operator-facing fix.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { repoRoot } from './fixture.js';

const probes = fs.readFileSync(path.join(repoRoot, 'docs/probes.md'), 'utf8');
const operator = fs.readFileSync(path.join(repoRoot, 'docs/operator.md'), 'utf8');

/** The backticked strings in the first column of the probes' "Requirement and reason strings" table. */
function requirementStrings(): string[] {
  const section = probes.split(/^## /m).find((part) => part.startsWith('Requirement and reason strings')) ?? '';
  const rows = section.split('\n').filter((line) => line.startsWith('| `'));
  return rows.flatMap((row) => [...(row.split(' | ')[0] ?? '').matchAll(/`([^`]+)`/g)].map((match) => match[1] ?? ''));
}

/** The longest part between placeholders (`<p>`, `N`, `M`) and ellipses: what every host prints. */
function fixedPart(requirement: string): string {
  const parts = requirement.split(/<[^>]*>|…|\b[NMAB]\b/).map((part) => part.trim());
  return parts.reduce((longest, part) => (part.length > longest.length ? part : longest), '');
}

const troubleshooting = operator.split(/^## Troubleshooting/m)[1] ?? '';
const strings = requirementStrings();

t.ok(strings.length >= 25, `docs/probes.md lists the requirement strings (${strings.length} found)`);
t.ok(troubleshooting.length > 0, 'docs/operator.md has a Troubleshooting section');
for (const requirement of strings) {
  const fixed = fixedPart(requirement);
  t.ok(fixed.length >= 8 && troubleshooting.includes(fixed), `operator guide covers: ${requirement}`);
}
