#!/usr/bin/env node
// Writes the DEP-5 copyright file: the fixed header, one stanza per license of the bundled
// production modules (from the staged package-lock.json), then the fixed tail with a
// standalone paragraph for every license named. A license without a paragraph fails the
// build, so a new dependency's license is never shipped unstated.
import fs from 'node:fs';
import path from 'node:path';

const [stagedRoot, headerFile, tailFile] = process.argv.slice(2);
if (stagedRoot === undefined || headerFile === undefined || tailFile === undefined) {
  console.error('usage: copyright.mjs STAGED_CODE_ROOT HEADER TAIL');
  process.exit(2);
}

const lock = JSON.parse(fs.readFileSync(path.join(stagedRoot, 'package-lock.json'), 'utf8'));
const filesByLicense = new Map();
for (const [location, entry] of Object.entries(lock.packages)) {
  if (location === '' || entry.dev === true || !fs.existsSync(path.join(stagedRoot, location))) continue;
  const license = String(entry.license ?? '')
    .replace(/^\((.*)\)$/, '$1')
    .replace(/ OR /g, ' or ');
  if (license === '') throw new Error(`${location}: no license in package-lock.json`);
  const files = filesByLicense.get(license) ?? [];
  files.push(`usr/lib/turnhost/${location}/*`);
  filesByLicense.set(license, files);
}

const tail = fs.readFileSync(tailFile, 'utf8');
const described = new Set([...tail.matchAll(/^License: (\S+)$/gm)].map((match) => match[1]));
const stanzas = [];
for (const [license, files] of [...filesByLicense].sort(([a], [b]) => a.localeCompare(b))) {
  for (const name of license.split(' or ')) {
    if (!described.has(name)) throw new Error(`license ${name} has no paragraph in ${tailFile}`);
  }
  stanzas.push(
    `Files:\n ${files.sort().join('\n ')}\nCopyright: the authors named in each module's own license file\nLicense: ${license}\n`,
  );
}
process.stdout.write(fs.readFileSync(headerFile, 'utf8') + stanzas.join('\n') + '\n' + tail);
