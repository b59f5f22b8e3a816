/**
 * A throwaway certificate authority made by openssl for one test file, and a server
 * certificate it signed for the given names (and 127.0.0.1): local fake upstreams serve TLS
 * that a client verifies only when it is told to trust this CA.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface TestCa {
  /** PEM of the CA certificate. */
  ca: string;
  caFile: string;
  key: string;
  cert: string;
  dir: string;
  remove(): void;
}

function openssl(args: string[], cwd: string): void {
  execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

export function makeTestCa(names: readonly string[]): TestCa {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-test-ca-'));
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    ['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=turnhost test CA'],
    dir,
  );
  openssl(
    ['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', `/CN=${names[0] ?? 'localhost'}`],
    dir,
  );
  const san = [...names.map((name) => `DNS:${name}`), 'IP:127.0.0.1'].join(',');
  fs.writeFileSync(path.join(dir, 'ext.cnf'), `subjectAltName=${san}\nbasicConstraints=CA:FALSE\n`);
  openssl(
    [
      'x509',
      '-req',
      '-in',
      'server.csr',
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      'server.pem',
      '-days',
      '2',
      '-extfile',
      'ext.cnf',
    ],
    dir,
  );
  const read = (name: string): string => fs.readFileSync(path.join(dir, name), 'utf8');
  return {
    ca: read('ca.pem'),
    caFile: path.join(dir, 'ca.pem'),
    key: read('server.key'),
    cert: read('server.pem'),
    dir,
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}
